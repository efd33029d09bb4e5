"""WSGI entry point: ``flask --app app run`` or ``gunicorn app:app``."""

from monark import create_app

app = create_app()
