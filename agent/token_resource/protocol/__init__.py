"""The kubelet's gRPC APIs as the agent speaks them: messages built from descriptors, method
paths and server handlers, one module per API.

``deviceplugin`` (v1beta1: Registration, DevicePlugin), ``podresources`` (v1
PodResourcesLister), ``pluginregistration`` (the plugin watcher's Registration) and ``dra``
(the DRAPlugin service, v1 and v1beta1). The messages are built at import time from
descriptors (``descriptor``), so they load on every protobuf runtime from 3.14 on. Imports
nothing of the agent's own.
"""
