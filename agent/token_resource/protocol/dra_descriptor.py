"""The kubelet's DRA node service (dra_v1.proto, dra_v1beta1.proto) as descriptors: see
``descriptor``. The two versions are the same messages under two proto packages."""

from __future__ import annotations

from token_resource.protocol.descriptor import MAP, REPEATED, STRING, Field, Method, ProtoFile

# message -> [(number, name, type or message name, "repeated" / "map" / None), as in the .proto.
# Device.share_id (5, v1 only: consumable capacity) is left out: the agent never shares a device.
MESSAGES: dict[str, list[Field]] = {
    "NodePrepareResourcesRequest": [(1, "claims", "Claim", REPEATED)],
    "NodePrepareResourcesResponse": [(1, "claims", "NodePrepareResourceResponse", MAP)],
    "NodePrepareResourceResponse": [
        (1, "devices", "Device", REPEATED),
        (2, "error", STRING, None),
    ],
    "Device": [
        (1, "request_names", STRING, REPEATED),
        (2, "pool_name", STRING, None),
        (3, "device_name", STRING, None),
        (4, "cdi_device_ids", STRING, REPEATED),
    ],
    "NodeUnprepareResourcesRequest": [(1, "claims", "Claim", REPEATED)],
    "NodeUnprepareResourcesResponse": [(1, "claims", "NodeUnprepareResourceResponse", MAP)],
    "NodeUnprepareResourceResponse": [(1, "error", STRING, None)],
    "Claim": [
        (1, "namespace", STRING, None),
        (2, "uid", STRING, None),
        (3, "name", STRING, None),
    ],
}

SERVICES: dict[str, list[Method]] = {
    "DRAPlugin": [
        (
            "NodePrepareResources",
            "NodePrepareResourcesRequest",
            "NodePrepareResourcesResponse",
            False,
        ),
        (
            "NodeUnprepareResources",
            "NodeUnprepareResourcesRequest",
            "NodeUnprepareResourcesResponse",
            False,
        ),
    ],
}

PACKAGE_PREFIX = "k8s.io.kubelet.pkg.apis.dra"
FILE_V1 = ProtoFile(
    "token_resource/protocol/dra_v1.proto", f"{PACKAGE_PREFIX}.v1", MESSAGES, SERVICES
)
FILE_V1BETA1 = ProtoFile(
    "token_resource/protocol/dra_v1beta1.proto", f"{PACKAGE_PREFIX}.v1beta1", MESSAGES, SERVICES
)
