"""PostgreSQL through Django's psycopg backend: the application's prepared statements planned
generically, pooled connections lent without a round trip.

``ENGINE: "common.postgres"`` (set by ``config.settings``): see ``common.postgres.base``.
"""
