"""The kubelet's gRPC APIs as the agent speaks them: messages built from descriptors, method
paths and server handlers, one module per API.

``deviceplugin`` (v1beta1: Registration, DevicePlugin) and ``podresources`` (v1
PodResourcesLister). The messages are built at import time from descriptors (``descriptor``),
so they load on every protobuf runtime from 3.14 on. Imports nothing of the agent's own.
"""
