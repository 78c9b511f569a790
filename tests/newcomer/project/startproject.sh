django-admin startproject mysite
cd mysite
python manage.py startapp myapp
