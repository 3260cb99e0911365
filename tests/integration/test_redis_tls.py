"""The TLS URL forms against private ``redis-server`` processes: ``rediss://``,
``rediss+cluster://`` (a one-node cluster holding every slot) and ``rediss+sentinel://`` (one
master, one sentinel), sync and async, with a throwaway CA made here by ``cryptography``.

Each server also listens on a plain port (only the topology helpers' health checks use it);
the stores reach it through its TLS port. A plain URL names the CA (``?ssl_ca_certs=``); the
cluster and sentinel forms take no certificate options, so there the CA is trusted the way
OpenSSL finds one by default (``SSL_CERT_FILE``). A client that does not trust it gets cache
errors, never a caller error.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstore import MemoryStore, Settings, UserMessage
from memstore.aio import AsyncMemoryStore
from tests.integration.conftest import free_port
from tests.integration.redis_topologies import Node, wait_until


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("memstore test CA"))
        .issuer_name(name("memstore test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class TlsSetup:
    """A one-node TLS cluster and a TLS master watched by one TLS sentinel."""

    def __init__(self, workdir: Path) -> None:
        ca, cert, key = make_certificates(workdir)
        self.ca = ca
        tls = [
            *("--tls-cert-file", str(cert), "--tls-key-file", str(key)),
            *("--tls-ca-cert-file", str(ca), "--tls-auth-clients", "no"),
        ]
        self.cluster_tls_port, self.master_tls_port, self.sentinel_tls_port = (
            free_port() for _ in range(3)
        )
        self.cluster = Node(
            workdir / "cluster",
            free_port(),
            [*tls, "--tls-port", str(self.cluster_tls_port), "--tls-cluster", "yes"],
            cluster_timeout_ms=1000,
        )
        self.master = Node(
            workdir / "master",
            free_port(),
            [*tls, "--tls-port", str(self.master_tls_port), "--tls-replication", "yes"],
        )
        self.sentinel = Node(
            workdir / "sentinel",
            free_port(),
            [*tls, "--tls-port", str(self.sentinel_tls_port), "--tls-replication", "yes"],
            sentinel=True,
        )

    def start(self) -> None:
        self.cluster.start()
        with self.cluster.client() as client:
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)

        def cluster_ok() -> bool:
            with self.cluster.client() as client:
                return bool(client.cluster("info")["cluster_state"] == "ok")

        wait_until(cluster_ok, 20, "the one-node TLS cluster to serve every slot")
        self.master.start()
        self.sentinel.workdir.mkdir(parents=True, exist_ok=True)
        (self.sentinel.workdir / "sentinel.conf").write_text(
            f"sentinel monitor mymaster 127.0.0.1 {self.master_tls_port} 1\n"
            "sentinel down-after-milliseconds mymaster 1000\n"
        )
        self.sentinel.start()

        def sentinel_sees_master() -> bool:
            with self.sentinel.client() as client:
                return "master" in str(client.sentinel_master("mymaster")["flags"])

        wait_until(sentinel_sees_master, 20, "the sentinel to reach the master over TLS")

    def url(self, form: str, ca_option: bool = True) -> str:
        """The URL of ``form``; a plain ``rediss://`` URL names the CA unless ``ca_option`` is
        off (the other forms take no certificate options)."""
        if form == "plain":
            query = f"?ssl_ca_certs={self.ca}" if ca_option else ""
            return f"rediss://127.0.0.1:{self.master_tls_port}/0{query}"
        if form == "cluster":
            return f"rediss+cluster://127.0.0.1:{self.cluster_tls_port}"
        return f"rediss+sentinel://127.0.0.1:{self.sentinel_tls_port}/mymaster/0"

    def stop(self) -> None:
        for node in (self.sentinel, self.master, self.cluster):
            node.kill()


@pytest.fixture(scope="module")
def tls_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSetup]:
    setup = TlsSetup(tmp_path_factory.mktemp("tls"))
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


def round_trip(settings: Settings, flavor: str) -> tuple[list[str], bool, int]:
    """Append, read through the window, and say: the texts, whether the window is cached, and
    the store's cache errors."""
    app_id = f"tls-{uuid.uuid4().hex[:8]}"
    texts = [f"{flavor} one", f"{flavor} two"]
    if flavor == "sync":
        with MemoryStore(settings) as store:
            store.migrate()
            store.memory(app_id).add_all([UserMessage(text=t) for t in texts])
            read = [str(m.text) for m in store.memory(app_id).messages()]
            cached = store.cache.read(app_id).messages is not None
            return read, cached, store.metrics()["cache_errors"]

    async def main() -> tuple[list[str], bool, int]:
        with MemoryStore(settings.model_copy(update={"redis_url": None})) as migrator:
            migrator.migrate()
        store = AsyncMemoryStore(settings)
        try:
            await store.memory(app_id).add_all([UserMessage(text=t) for t in texts])
            messages = await store.memory(app_id).messages()
            read = [str(m.text) for m in messages]
            window: Any = await store.cache.read(app_id)
            return read, window.messages is not None, store.metrics()["cache_errors"]
        finally:
            await store.close()

    return asyncio.run(main())


@pytest.mark.parametrize("flavor", ["sync", "async"])
@pytest.mark.parametrize("form", ["plain", "cluster", "sentinel"])
def test_tls_url_forms_cache_windows(
    tls_setup: TlsSetup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str, flavor: str
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'm.db'}",
        redis_url=tls_setup.url(form),
        redis_timeout_seconds=1.0,
    )
    if form != "plain":
        monkeypatch.setenv("SSL_CERT_FILE", str(tls_setup.ca))
    texts, cached, errors = round_trip(settings, flavor)
    assert texts == [f"{flavor} one", f"{flavor} two"]
    assert cached and errors == 0

    # without the CA the handshake fails: served from SQL, counted, never raised
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    untrusted = settings.model_copy(update={"redis_url": tls_setup.url(form, ca_option=False)})
    texts, cached, errors = round_trip(untrusted, flavor)
    assert texts == [f"{flavor} one", f"{flavor} two"]
    assert not cached and errors >= 1
