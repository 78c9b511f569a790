: "${CONVERSATION:?is not set in this terminal: set it to the conversation_id of step 5}"
pip install -q websockets
TICKET=$(curl -s -u alice:secret -X POST http://127.0.0.1:8000/api/agents/conversations/$CONVERSATION/ws-ticket/ \
         | python -c "import json, sys; print(json.load(sys.stdin)['ticket'])")
python follow.py "ws://127.0.0.1:8000/ws/conversations/$CONVERSATION/?ticket=$TICKET"
