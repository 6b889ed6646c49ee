"""What several apps share, below all of them: running statements, shared SQL fragments.

Apps import from here; this package imports no app.
"""
