export AGENT_PERSISTENCE_KEY="$(python -m agent_persistence.keygen)"  # keep it: it decrypts what it encrypted
python manage.py migrate
python manage.py check
DJANGO_SUPERUSER_PASSWORD=secret python manage.py createsuperuser --no-input --username alice --email alice@example.com
