"""The kubelet's plugin registration protocol (pluginregistration.proto) as a descriptor: see
``descriptor``."""

from __future__ import annotations

from token_resource.protocol.descriptor import BOOL, REPEATED, STRING, Field, Method, ProtoFile

# message -> [(number, name, type or message name, "repeated" / None)], as in the .proto.
MESSAGES: dict[str, list[Field]] = {
    "InfoRequest": [],
    "PluginInfo": [
        (1, "type", STRING, None),
        (2, "name", STRING, None),
        (3, "endpoint", STRING, None),
        (4, "supported_versions", STRING, REPEATED),
    ],
    "RegistrationStatus": [
        (1, "plugin_registered", BOOL, None),
        (2, "error", STRING, None),
    ],
    "RegistrationStatusResponse": [],
}

SERVICES: dict[str, list[Method]] = {
    "Registration": [
        ("GetInfo", "InfoRequest", "PluginInfo", False),
        ("NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse", False),
    ],
}

FILE = ProtoFile(
    "token_resource/protocol/pluginregistration.proto", "pluginregistration", MESSAGES, SERVICES
)
