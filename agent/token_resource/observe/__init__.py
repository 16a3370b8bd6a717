"""The observability wing: talks to whoever watches the agent (operators and Prometheus).

The wings report events to an ``observer``; ``report`` is what ``status`` shows; ``metrics``
counts and reads them for Prometheus and ``exposition`` writes them out (a textfile, an HTTP
listener). It may import ``config`` and ``host``; the metrics library is imported only with
``[metrics]`` configured.
"""
