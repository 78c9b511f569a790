. /path/to/venv/bin/activate   # the virtualenv you installed agent_persistence into (step 1)
cd mysite
CONVERSATION=PASTE-THE-CONVERSATION-ID   # the conversation_id that step 5 printed
