"""Redaction gaps of the second adversarial review, closed at the one
boundary (``redact.py``): an env secret in its escaped or base64 form, percent-encoded URL
credentials, a header written as a Python tuple. One test per form at the redactor, and one
capture through ``pytest --selfheal`` + ``selfheal report`` showing none reaches disk or the
report (the job summary is that report)."""

from __future__ import annotations

import base64
import json
import string
from pathlib import Path

import pytest
from helpers import capture, cli, make_project

from pytest_selfheal.redact import REDACTED, Redactor

from .conftest import walk_written
from .test_secrets_everywhere import RNG

SECRET = "Sx" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(14)) + '\\q"z'
PLAIN = "Pz" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(18))
REDACTOR = Redactor({"SERVICE_TOKEN": SECRET, "DB_PASSWORD": PLAIN})


@pytest.mark.parametrize("form", [
    json.dumps({"token": SECRET})[len('{"token": "'):-2],  # JSON-escaped: \\ and \"
    repr(SECRET)[1:-1],  # a Python repr: \\
    base64.b64encode(SECRET.encode()).decode(),
    base64.b64encode(PLAIN.encode()).decode().rstrip("="),
    base64.urlsafe_b64encode(PLAIN.encode()).decode(),
])
def test_an_env_secret_in_its_written_forms(form: str) -> None:
    out = REDACTOR.redact(f"value: <{form}> end")
    assert form not in out and REDACTED in out


@pytest.mark.parametrize("text, hidden, kept", [
    ("next=https%3A%2F%2Fdeploy%3Ahunter2pass%40example.com%2Fx", "hunter2pass", "deploy"),
    ("next=HTTPS%3a%2f%2fdeploy%3ahunter2pass%40example.com", "hunter2pass", "deploy"),
])
def test_percent_encoded_url_credentials(text: str, hidden: str, kept: str) -> None:
    out = REDACTOR.redact(text)
    assert hidden not in out and kept in out and "example.com" in out


@pytest.mark.parametrize("text, hidden", [
    ("[('Authorization', 'Basic dXNlcjpodW50ZXIy'), ('Accept', 'json')]", "dXNlcjpodW50ZXIy"),
    ('(("Cookie", "session=abc123secret"),)', "session=abc123secret"),
    ("('X-Api-Key', 'k-1234567890')", "k-1234567890"),
])
def test_tuple_style_headers(text: str, hidden: str) -> None:
    out = REDACTOR.redact(text)
    assert hidden not in out and REDACTED in out
    assert ("Authorization" in out) == ("Authorization" in text)  # the header name stays as written


def test_none_of_the_forms_reaches_disk_or_the_report(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_forms.py": """
        import base64, json, os

        def test_forms():
            secret = os.environ["SERVICE_TOKEN"]
            b64 = base64.b64encode(os.environ["DB_PASSWORD"].encode()).decode()
            headers = [("Authorization", "Basic " + b64)]
            url = "https%3A%2F%2Fdeploy%3A" + os.environ["DB_PASSWORD"] + "%40example.com"
            assert json.dumps({"token": secret}) == repr(secret) + b64 + str(headers) + url
    """})
    env = {"SERVICE_TOKEN": SECRET, "DB_PASSWORD": PLAIN}
    capture(project, env=env)
    report = cli("report", cwd=project, env=env)
    written = walk_written(project / ".selfheal")
    forms = [json.dumps(SECRET)[1:-1], repr(SECRET)[1:-1], base64.b64encode(PLAIN.encode()).decode().rstrip("="),
             PLAIN]
    for path in written:
        text = path.read_bytes().decode("utf-8", errors="replace")
        assert not [f[:6] for f in forms if f in text], path
    assert not [f[:6] for f in forms if f in report.stdout]
