"""TLS settings (loadgen.wire.tls): request.ca_cert / --ca-cert and request.verify_tls / --insecure, the
one context per process, the config errors of a bad file, and the line a certificate that did not
verify gets (what failed and the fix). Real certificates from the openssl command (skipped
without it) and a TLS server of its own process (tests.support.tlsserver) for the real verify codes."""

from __future__ import annotations

import argparse
import ssl
import subprocess

import pytest

from loadgen import errors
from loadgen.config import ConfigError, load_scenario, register_options, scenario_from_options
from loadgen.errors import CertificateRejected, RequestError
from loadgen.server.start_check import _refusal, discover_model
from loadgen.wire import tls
from loadgen.wire.client import StreamClient, transport_failure
from loadgen.wire.gevent_io import ConnectError
from tests.support.tlsserver import cert_or_skip, tls_server


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    return cert_or_skip(tmp_path_factory)


@pytest.fixture(autouse=True)
def default_settings():
    """Every test starts and ends with the process's default settings (they are per process)."""
    tls.configure(None, True)
    yield
    tls.configure(None, True)


def _parse(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register_options(parser)
    return parser.parse_args(args)


# -- the settings ------------------------------------------------------------------------------------

def test_the_defaults_verify_with_the_system_store():
    request = load_scenario(None).request
    assert (request.ca_cert, request.verify_tls) == (None, True)


def test_ca_cert_and_insecure_flags_set_the_request_keys():
    request = scenario_from_options(_parse(["--ca-cert", "ca.pem", "--insecure"])).request
    assert (request.ca_cert, request.verify_tls) == ("ca.pem", False)
    assert scenario_from_options(_parse([])).request.verify_tls is True


def test_insecure_as_the_locust_master_relays_it_is_still_the_key_false():
    ns = _parse([])
    ns.insecure = True  # a worker's options arrive typed from the master
    assert scenario_from_options(ns).request.verify_tls is False


@pytest.mark.parametrize("key,value,problem", [
    ("request.verify_tls", "no", "must be true or false, not text"),
    ("request.ca_cert", "", "must not be empty"),
    ("request.ca_cert", 7, "must be text, not int"),
])
def test_bad_values_name_the_key(key, value, problem):
    with pytest.raises(ConfigError) as err:
        load_scenario(None, {key: value})
    assert err.value.key == key and err.value.problem == problem


# -- the ca_cert file, loaded when the process learns its settings --------------------------------------

def test_a_missing_ca_cert_is_a_config_error_naming_the_key_the_path_and_the_fix(tmp_path):
    path = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError) as err:
        tls.configure(path, True)
    assert str(err.value) == (f"request.ca_cert: file not found, got {path!r} (pass a PEM file with the CA "
                              "certificate that signed the server's certificate (or the server's own "
                              "certificate) to --ca-cert, or --insecure to skip the check)")


def test_a_directory_is_not_a_ca_cert(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        tls.configure(str(tmp_path), True)


@pytest.mark.parametrize("content", [b"", b"not a certificate\n", bytes(range(256))])
def test_a_file_without_a_pem_certificate_says_so_and_how_to_convert_one(tmp_path, content):
    path = tmp_path / "ca.der"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as err:
        tls.configure(str(path), True)
    assert err.value.key == "request.ca_cert" and err.value.value == str(path)
    assert err.value.problem == "holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    assert "openssl x509 -inform der" in err.value.fix


def test_a_private_key_is_not_a_ca_cert(cert):
    _, key = cert
    with pytest.raises(ConfigError, match="holds no PEM certificate"):
        tls.configure(str(key), True)


def test_a_bad_file_leaves_the_settings_as_they_were(cert, tmp_path):
    tls.configure(str(cert[0]), True)
    with pytest.raises(ConfigError):
        tls.configure(str(tmp_path / "nope.pem"), False)
    assert tls.settings() == tls.TlsSettings(str(cert[0]), True)


def test_ca_cert_is_trusted_instead_of_the_system_store(cert):
    tls.configure(str(cert[0]), True)
    context = tls.client_context()
    assert context.cert_store_stats()["x509_ca"] == 1  # only the file's certificate, as curl --cacert
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_ssl_cert_file_names_the_store_as_for_pythons_ssl(cert, monkeypatch):
    with tls_server(*cert) as url:
        tls._context.cache_clear()  # the context of the default settings is built again, with the variable
        monkeypatch.setenv("SSL_CERT_FILE", str(cert[0]))
        try:
            assert tls.client_context().cert_store_stats()["x509_ca"] == 1  # that file, not the system's
            assert _get(url).status == 404  # trusted: the server's own answer
        finally:
            tls._context.cache_clear()


def test_ssl_cert_dir_names_a_hashed_directory_as_for_pythons_ssl(cert, monkeypatch, tmp_path):
    """A directory of certificates named by their subject hash (``openssl rehash``), as a
    corporate CA is often installed: trusted beside the system file."""
    subject_hash = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", str(cert[0])],
                                  capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / f"{subject_hash}.0").write_bytes(cert[0].read_bytes())
    with tls_server(*cert) as url:
        tls._context.cache_clear()
        try:
            assert isinstance(_get(url), CertificateRejected)  # the system store alone
            tls._context.cache_clear()
            monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
            assert _get(url).status == 404  # trusted through the directory
        finally:
            tls._context.cache_clear()


def test_one_context_per_process_shared_by_every_https_client_and_left_as_it_was():
    tls.configure(None, False)
    clients = [StreamClient("https://127.0.0.1:9", read_timeout_s=1) for _ in range(3)]  # no connection yet
    try:
        contexts = {id(c._http._connection_pool.ssl_context) for c in clients}
        assert contexts == {id(tls.client_context())}
        context = tls.client_context()  # the pool set its check_hostname: to what it was
        assert (context.check_hostname, context.verify_mode) == (False, ssl.CERT_NONE)
    finally:
        for c in clients:
            c.close()


# -- a certificate that did not verify -----------------------------------------------------------------

SKIP = "or --insecure to skip the check"


@pytest.mark.parametrize("message,code,ca_cert,expected", [
    ("self-signed certificate", 18, None,
     f"(self-signed certificate); pass the server's CA certificate with --ca-cert PATH, {SKIP}"),
    ("unable to get local issuer certificate", 20, None,
     f"(unable to get local issuer certificate); pass the server's CA certificate with --ca-cert PATH, {SKIP}"),
    ("unable to get local issuer certificate", 20, "/etc/ca.pem",
     "(unable to get local issuer certificate); --ca-cert /etc/ca.pem holds neither the CA that signed it nor "
     f"the server's own certificate: pass one of them, {SKIP}"),
    ("Hostname mismatch, certificate is not valid for 'gw.internal'.", 62, None,
     f"(Hostname mismatch, certificate is not valid for 'gw.internal'); use the host name the certificate "
     f"names in --host, {SKIP}"),
    ("certificate has expired", 10, "/etc/ca.pem",
     f"(certificate has expired); renew the server's certificate (or check this machine's clock), {SKIP}"),
])
def test_the_rejection_says_what_failed_and_the_fix_for_it(message, code, ca_cert, expected):
    assert tls.rejection(message, code, ca_cert) == "the server's TLS certificate did not verify " + expected


def verify_error(message: str, code: int) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                          f"{message} (_ssl.c:1006)")
    exc.verify_message, exc.verify_code = message, code
    return exc


def test_a_certificate_error_at_connect_is_a_certificate_rejected_connect_failure():
    failure = transport_failure(ConnectError(verify_error("self-signed certificate", 18)), connected=False)
    assert isinstance(failure, CertificateRejected) and failure.kind == errors.CONNECT_FAILED
    assert failure.message == tls.rejection("self-signed certificate", 18, None)


def test_the_start_check_line_names_the_certificate_not_a_server_that_is_down():
    exc = transport_failure(ConnectError(verify_error("self-signed certificate", 18)), connected=False)
    line = str(_refusal("https://gw.internal", exc, "OPENAI_API_KEY"))
    assert line == ("cannot connect to https://gw.internal: the server's TLS certificate did not verify "
                    f"(self-signed certificate); pass the server's CA certificate with --ca-cert PATH, {SKIP}")
    down = _refusal("https://gw.internal", RequestError(errors.CONNECT_FAILED, "Connection refused"), None)
    assert "is the server running?" in str(down)  # a refused connection keeps its line


def _get(url: str):
    client = StreamClient(url, connect_timeout_s=5, read_timeout_s=5)
    try:
        return client.get_json("/v1/models")
    except RequestError as exc:
        return exc
    finally:
        client.close()


def test_a_real_tls_server_is_rejected_trusted_with_its_certificate_and_unchecked_when_insecure(cert):
    with tls_server(*cert) as url:  # a self-signed certificate for IP 127.0.0.1; it answers a JSON 404
        rejected = _get(url)
        tls.configure(str(cert[0]), True)
        trusted = _get(url)
        mismatch = _get(url.replace("127.0.0.1", "localhost"))  # the same server, a name it is not for
        worker_line = None
        try:
            tls.configure(None, True)
            discover_model(StreamClient(url, connect_timeout_s=5, read_timeout_s=5))
        except errors.ServerUnusableError as exc:
            worker_line = str(exc)
        tls.configure(None, False)
        insecure = _get(url)
    assert isinstance(rejected, CertificateRejected)
    assert rejected.message == tls.rejection("self-signed certificate", 18, None)
    assert trusted.status == 404 and insecure.status == 404  # through TLS: the server's own answer
    assert isinstance(mismatch, CertificateRejected) and "use the host name the certificate names" in mismatch.message
    # a worker discovering the model says the certificate's fix, not "set the model with --model"
    assert worker_line == f"GET /v1/models failed (connect_failed: {rejected.message})"
