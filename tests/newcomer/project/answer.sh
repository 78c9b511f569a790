curl -s -w '\n' -u alice:secret http://127.0.0.1:8000/api/agents/conversations/$CONVERSATION/interrupts/
INTERRUPT=$(curl -s -u alice:secret http://127.0.0.1:8000/api/agents/conversations/$CONVERSATION/interrupts/ \
            | python -c "import json, sys; print(json.load(sys.stdin)['interrupts'][0]['id'])")
curl -s -w '\n' -u alice:secret -H 'Content-Type: application/json' \
     -d '{"answers": [{"id": "'$INTERRUPT'", "response": {"approved": true}}]}' \
     http://127.0.0.1:8000/api/agents/conversations/$CONVERSATION/interrupts/
