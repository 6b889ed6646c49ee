"""Helpers the tests share, as importable modules (conftests hold only fixtures)."""
