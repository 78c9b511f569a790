daphne -b 127.0.0.1 -p 8000 mysite.asgi:application
