"""How the agent reaches the API server: HTTPS requests and their errors (``client``), who it
is there (``credentials``: a kubeconfig or the pod's service account, and the Node's name),
connections kept between calls (``kept``) and watches that go on where they stopped
(``watching``)."""
