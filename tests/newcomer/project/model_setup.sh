pip install openai
export OPENAI_API_KEY=sk-...   # your key; OPENAI_BASE_URL too for an OpenAI-compatible server
