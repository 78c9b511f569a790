CONVERSATION=$(python -c "import uuid; print(uuid.uuid4())")
curl -s -w '\n' -u alice:secret -H 'Content-Type: application/json' \
     -d '{"content": "What is the weather in Oslo?", "agent": "helper"}' \
     http://127.0.0.1:8000/api/agents/conversations/$CONVERSATION/turns/
