"""What several apps share, below all of them; this package imports no app.

``errors`` the one shape of API errors and its schema; ``rules`` what a name or a quantity may
be; ``filters`` and ``pagination`` strict query strings and long lists; ``commands`` the base
of management commands; ``db`` and ``sql`` running statements and shared SQL; ``knobs`` the
service's settings, typed and checked.
"""
