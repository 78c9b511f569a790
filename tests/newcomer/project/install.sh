pip install '/path/to/agent_persistence[server]'
