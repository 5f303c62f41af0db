"""How this process checks servers' TLS certificates: its one ``ssl.SSLContext``, and what to say
when a certificate did not verify.

The settings are the scenario's ``request.ca_cert`` (``--ca-cert PATH``) and
``request.verify_tls`` (``--insecure`` sets it false):

- ``ca_cert``: the certificates in this PEM file (a CA bundle, or the server's own self-signed
  certificate) are the ones trusted, *instead of* the system store, as ``curl --cacert`` does.
- no ``ca_cert``: the system store, the file and the hashed directory OpenSSL names
  (``ssl.get_default_verify_paths``, which honours the ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``
  environment variables as Python's ssl does by default), with certifi's bundle when there is no
  such file: the rule geventhttpclient applied before this module, plus the directory.
- ``verify_tls`` false: no certificate and no host-name check at all.

One context per process (``client_context``), shared by every connection: building one reads a
whole CA bundle (milliseconds of CPU each), which per connection would cost seconds at a
1024-user ramp. ``configure`` sets this process's settings once its scenario is known
(``runtime.install``; a worker again with the master's) and loads ``ca_cert`` then, so a bad file
is a config error (exit 2) before anything is sent.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass
from pathlib import Path

import gevent.ssl

from loadgen.errors import ConfigError

CA_CERT_KEY = "request.ca_cert"
# OpenSSL's X509_V_ERR_* codes (ssl.SSLCertVerificationError.verify_code) that --ca-cert cannot fix
HOST_MISMATCH_CODES = frozenset({62, 64})  # HOSTNAME_MISMATCH, IP_ADDRESS_MISMATCH
OUT_OF_DATE_CODES = frozenset({9, 10})  # CERT_NOT_YET_VALID, CERT_HAS_EXPIRED
SKIP = "or --insecure to skip the check"


@dataclass(frozen=True)
class TlsSettings:
    ca_cert: str | None = None
    verify: bool = True


_settings = TlsSettings()


def configure(ca_cert: str | None, verify: bool) -> None:
    """This process's settings (the scenario's ``request.ca_cert``, ``request.verify_tls``). A
    ``ca_cert`` is loaded now: one that does not load is a ConfigError, and the settings stay."""
    global _settings
    tls = TlsSettings(ca_cert, verify)
    if ca_cert is not None:
        _context(tls)
    _settings = tls


def settings() -> TlsSettings:
    return _settings


def client_context() -> gevent.ssl.SSLContext:
    """The one context of this process's settings, built on first use (module docstring)."""
    return _context(_settings)


@functools.cache
def _context(tls: TlsSettings) -> gevent.ssl.SSLContext:
    # gevent's context: its sockets wait cooperatively, with or without monkey-patching
    if tls.ca_cert is not None:
        context = _load_ca_cert(tls.ca_cert)
    elif tls.verify:
        system = ssl.get_default_verify_paths()  # SSL_CERT_FILE / SSL_CERT_DIR when they exist
        context = gevent.ssl.create_default_context(cafile=system.cafile or _certifi(), capath=system.capath)
    else:
        context = gevent.ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not tls.verify:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def _certifi() -> str:
    import certifi  # geventhttpclient's dependency, for a machine without a system store

    return certifi.where()


def _load_ca_cert(path: str) -> gevent.ssl.SSLContext:
    fix = ("pass a PEM file with the CA certificate that signed the server's certificate (or the "
           "server's own certificate) to --ca-cert, or --insecure to skip the check")
    file = Path(path)
    if not file.is_file():
        problem = "is a directory, not a file" if file.is_dir() else "file not found"
        raise ConfigError(CA_CERT_KEY, path, problem, fix)
    try:
        return gevent.ssl.create_default_context(cafile=path)
    except PermissionError:
        raise ConfigError(CA_CERT_KEY, path, "cannot be read: permission denied",
                          "make it readable (chmod u+r)") from None
    except ssl.SSLError:  # not PEM, empty, a key and no certificate
        raise ConfigError(CA_CERT_KEY, path, "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                          "pass the CA certificate in PEM form to --ca-cert; a DER file converts with "
                          "`openssl x509 -inform der -in ca.der -out ca.pem`") from None


def rejection(verify_message: str, verify_code: int, ca_cert: str | None) -> str:
    """What a certificate that did not verify means, in one line: OpenSSL's reason
    (``verify_message``: self-signed, unknown CA, host name mismatch, expired) and the fix."""
    if verify_code in HOST_MISMATCH_CODES:
        fix = f"use the host name the certificate names in --host, {SKIP}"
    elif verify_code in OUT_OF_DATE_CODES:
        fix = f"renew the server's certificate (or check this machine's clock), {SKIP}"
    elif ca_cert is not None:
        fix = (f"--ca-cert {ca_cert} holds neither the CA that signed it nor the server's own certificate: "
               f"pass one of them, {SKIP}")
    else:
        fix = f"pass the server's CA certificate with --ca-cert PATH, {SKIP}"
    return f"the server's TLS certificate did not verify ({verify_message.rstrip('.')}); {fix}"
