# Connection plugin "nsenter": run Ansible's tasks inside a container that is already
# running on the controller (a systemd-nspawn machine, for instance), by entering all of
# its namespaces with nsenter(1). It needs root on the controller and nothing in the
# container but /bin/sh, cat and Python. The system tests (tests/system/test_ansible.py)
# use it to manage booted Debian 12 containers like real hosts; ansible-core's chroot
# connection cannot do that (systemctl there talks to no systemd).
from __future__ import annotations

DOCUMENTATION = """
    name: nsenter
    short_description: run tasks in a running container's namespaces with nsenter
    description:
        - Runs commands with C(nsenter -t PID --all) in the namespaces (mount, PID, network,
          IPC, UTS, cgroup) of a process inside a container, usually the container's init
          (for systemd-nspawn, the C(systemd) child of the nspawn process).
        - Files are copied by piping them through nsenter and C(cat). Supports pipelining.
        - The controller must run as root; become is not needed (commands run as the
          container's root).
    author: token-resource maintainers
    options:
        remote_addr:
            description: The PID, on the controller, of a process inside the container.
            default: inventory_hostname
            type: str
            vars:
                - name: inventory_hostname
                - name: ansible_host
                - name: ansible_nsenter_pid
        nsenter_path:
            description: The nsenter executable on the controller.
            default: nsenter
            type: str
            vars:
                - name: ansible_nsenter_path
        container_path:
            description: PATH for the commands run inside the container.
            default: /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
            type: str
            vars:
                - name: ansible_nsenter_container_path
    extends_documentation_fragment:
        - connection_pipelining
"""

import os
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

display = Display()


class Connection(ConnectionBase):
    """Commands and file transfers through nsenter into a running container."""

    transport = "nsenter"
    has_pipelining = True
    # Commands run as the container's root: nothing to become.
    default_user = "root"

    def _connect(self) -> Connection:
        if not self._connected:
            pid = self._pid()
            if not os.path.exists(f"/proc/{pid}/ns/mnt"):
                raise AnsibleConnectionFailure(f"nsenter: no process {pid} on the controller")
            if shutil.which(self.get_option("nsenter_path")) is None:
                raise AnsibleConnectionFailure(
                    f"nsenter: {self.get_option('nsenter_path')} not found (util-linux)"
                )
            display.vvv(f"NSENTER INTO PID {pid}", host=self._play_context.remote_addr)
            self._connected = True
        return self

    def _pid(self) -> str:
        pid = str(self.get_option("remote_addr"))
        if not pid.isdigit():
            raise AnsibleConnectionFailure(
                f"nsenter: ansible_host must be the PID of a process in the container, got {pid!r}"
            )
        return pid

    def _argv(self, *command: str) -> list[str]:
        """nsenter into every namespace of the container, with a clean environment there."""
        return [
            self.get_option("nsenter_path"),
            "--target",
            self._pid(),
            "--all",
            "--",
            "env",
            "-i",
            f"PATH={self.get_option('container_path')}",
            "HOME=/root",
            "LANG=C.UTF-8",
            *command,
        ]

    def exec_command(
        self, cmd: str, in_data: bytes | None = None, sudoable: bool = True
    ) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        display.vvv(f"EXEC {to_text(cmd)}", host=self._play_context.remote_addr)
        process = subprocess.Popen(
            self._argv("/bin/sh", "-c", to_text(cmd)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        stdout, stderr = process.communicate(in_data)
        return process.returncode, stdout, stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._play_context.remote_addr)
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound(f"file or module does not exist: {in_path}")
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as source:
            result = subprocess.run(
                self._argv("/bin/sh", "-c", 'cat > "$1"', "sh", out_path),
                stdin=source,
                capture_output=True,
                check=False,
            )
        if result.returncode != 0:
            raise AnsibleError(
                f"failed to transfer {in_path} to {out_path}: {to_text(result.stderr)}"
            )

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._play_context.remote_addr)
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as target:
            result = subprocess.run(
                self._argv("cat", in_path), stdout=target, stderr=subprocess.PIPE, check=False
            )
        if result.returncode != 0:
            raise AnsibleError(f"failed to fetch {in_path}: {to_text(result.stderr)}")

    def reset(self) -> None:
        pass

    def close(self) -> None:
        self._connected = False
