"""The plugin registration message classes (see ``descriptor`` and
``pluginregistration_descriptor``), under protoc's module name; typed by
``pluginregistration_pb2.pyi``.
"""

from token_resource.protocol.pluginregistration_descriptor import FILE

_classes = FILE.message_classes()
DESCRIPTOR = _classes["InfoRequest"].DESCRIPTOR.file
InfoRequest = _classes["InfoRequest"]
PluginInfo = _classes["PluginInfo"]
RegistrationStatus = _classes["RegistrationStatus"]
RegistrationStatusResponse = _classes["RegistrationStatusResponse"]
