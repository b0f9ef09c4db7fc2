"""The web console that ``lamina serve`` shows at ``/``: its REST calls (``api``, bodies in
``models``) and its server-rendered pages (``pages``, ``templates/``, ``static/``)."""
