"""Drop-in modules: other rate-limiting libraries' APIs, decided by django_rl."""
