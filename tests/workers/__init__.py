"""Programs the tests run in other processes: ``python -m tests.workers.<name> ARGS``.

Each is a module with a ``main`` (so the linters and the type checker read it like any other
code), started with the environment of ``tests.helpers.processes.child_env``: ``DATABASE_URL``
names the test database, ``DJANGO_SETTINGS_MODULE`` the project's settings. Each sets Django up
itself, inside ``main``, so importing one (as the tests do for the drivers and constants some of
them share) loads nothing of Django.

- ``replica``: one contention replica (select, hold, spend or release; JSON lines);
- ``remote_replica``: a replica driven over stdin/stdout, and ``RemoteReplica``, its driver;
- ``forking_replica``: a replica that forks, to check that listeners do not cross a fork;
- ``holding_replica``: select, report, then hang until killed or spend (crash recovery);
- ``app_loader``: load every app and run ``check``, reporting whether a listener started;
- ``load_client``: an HTTP client selecting, spending and releasing under faults;
- ``load_seed``: tokens and an API key for the load clients;
- ``core_imports``: import the framework-free core and list what got loaded.
"""
