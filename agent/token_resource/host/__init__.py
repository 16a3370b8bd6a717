"""The host wing: talks to what runs beside the agent on its own machine.

systemd's notification socket (``notify``), the journal (``logs``), the operator's
``token-resource reload``/``status``/``handover`` (``control``), the successor a handover
starts (``handover``), inotify (``fswatch``), the lock that keeps one agent per directory
(``lock``), sockets whose server is gone (``listeners``) and the C library's allocator
(``memory``). It imports nothing of the agent's own outside this wing.
"""
