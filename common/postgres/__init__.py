"""PostgreSQL through Django's psycopg backend, lending pooled connections without a round trip.

``ENGINE: "common.postgres"`` (set by ``config.settings`` when ``DATABASE_POOL_SIZE`` gives
each process a pool): see ``common.postgres.base``.
"""
