"""The node's side of client keys: entries, the key table's lookup, the key file and the command that writes it."""

import json
import os
import stat
import subprocess
import sys

import pytest

from engine_node.client_keys import (
    CLIENT,
    SCRAPE,
    KeyEntryInvalid,
    KeyTable,
    key_entry,
    key_sha256,
    load_key_file,
    new_key,
    parse_entries,
    parse_entry,
)
from engine_node.gateway_access import path_problem
from tests.live_server import ROOT


def table(*entries) -> KeyTable:
    return KeyTable(parse_entries(list(entries), "bundle"))


def test_a_key_is_found_only_with_its_own_secret_and_kind():
    key, other = new_key(), new_key()
    keys = table(key_entry(key, name="web", business_tags=["order"]), key_entry(other, name="prom", kind=SCRAPE))
    grant = keys.find(f"Bearer {key}", CLIENT)
    assert grant.name == "web" and grant.business_tags == {"order"} and grant.owner == key_sha256(key)
    assert keys.find(f"bearer {key}", CLIENT) is grant  # the scheme is case-insensitive
    assert keys.find(f"Bearer {key}", SCRAPE) is None
    assert keys.find(f"Bearer {other}", CLIENT) is None and keys.find(f"Bearer {other}", SCRAPE).name == "prom"
    for header in (None, "", key, f"Basic {key}", f"Bearer {key}x", f"Bearer {key[:12]}", "Bearer \udcff", "Bearer"):
        assert keys.find(header, CLIENT) is None, header
    assert keys.requires_scrape_key and keys.client_count == 1
    assert not table(key_entry(key, name="web")).requires_scrape_key
    assert KeyTable().find(f"Bearer {key}", CLIENT) is None


def test_two_keys_sharing_a_prefix_are_told_apart_by_their_hash():
    key = new_key()
    twin = key[:12] + new_key()[12:]
    keys = table(key_entry(key, name="one"), key_entry(twin, name="two"))
    assert keys.find(f"Bearer {key}", CLIENT).name == "one" and keys.find(f"Bearer {twin}", CLIENT).name == "two"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "Has Space"}, "name: must be"),
        ({"prefix": "abc"}, "prefix"),
        ({"sha256": "z" * 64}, "sha256"),
        ({"kind": "admin"}, "kind: must be one of client, scrape"),
        ({"business_tags": "legal"}, "business_tags"),
        ({"business_tags": ["bad tag"]}, "business_tags"),
        ({"business_tags": ["t"] * 65}, "at most 64"),
        ({"kind": "scrape", "business_tags": ["legal"]}, "a scrape key"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_field(change, words):
    entry = {**key_entry(new_key(), name="web"), **change}
    with pytest.raises(KeyEntryInvalid, match=words):
        parse_entry(entry)
    # In a bundle, the bad entry is left out and the good ones still work.
    good = new_key()
    keys = table(entry, key_entry(good, name="good"))
    assert keys.find(f"Bearer {good}", CLIENT).name == "good" and keys.client_count == 1


def test_a_bundle_section_that_is_not_a_list_accepts_no_key():
    assert parse_entries({"name": "x"}, "bundle") == [] and parse_entries(None, "bundle") == []


@pytest.mark.subprocess
def test_the_key_file_command_writes_a_private_file_the_agent_loads(tmp_path):
    path = tmp_path / "keys" / "client_keys.json"
    command = [sys.executable, "-m", "engine_node.client_keys", "new", "--file", str(path)]
    done = subprocess.run(
        [*command, "--name", "probe", "--business-tag", "legal"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    key = done.stdout.strip()
    assert key.startswith("cpk_") and "shown once" in done.stderr and key not in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    scrape = subprocess.run([*command, "--name", "prom", "--kind", "scrape"], cwd=ROOT, capture_output=True, text=True)
    keys = KeyTable(load_key_file(path))
    assert keys.find(f"Bearer {key}", CLIENT).business_tags == {"legal"}
    assert keys.find(f"Bearer {scrape.stdout.strip()}", SCRAPE).source == "file"
    again = subprocess.run([*command, "--name", "probe"], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 2 and "already has a key named 'probe'" in again.stderr


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json", "Expecting value"),
        ("[]", "client_keys list"),
        ('{"client_keys": [{"name": "x"}]}', "client_keys[0]: x: prefix"),
    ],
)
@pytest.mark.subprocess
def test_a_bad_key_file_stops_the_agent_at_start_naming_the_problem(tmp_path, content, words):
    path = tmp_path / "keys.json"
    path.write_text(content)
    with pytest.raises(KeyEntryInvalid, match=words.replace("[", r"\[").replace("]", r"\]")):
        load_key_file(path)
    started = subprocess.run(
        [sys.executable, "-m", "engine_node", "--backend", "simulator", "--client-keys-file", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2 and "--client-keys-file" in started.stderr


@pytest.mark.parametrize(
    "target",
    ["/v1/chat/completions", "/v1/models", "/healthz", "/v1/sessions/AbC-_9/stream?after=3", "/v1/x?next=/../%2e"],
)
def test_ordinary_targets_pass_the_path_check(target):
    assert path_problem(target) is None


def test_the_key_file_shape_is_what_the_bundle_carries():
    key = new_key()
    entry = key_entry(key, name="web", business_tags=["b", "a", "a"])
    assert entry == {
        "name": "web",
        "prefix": key[:12],
        "sha256": key_sha256(key),
        "kind": "client",
        "business_tags": ["a", "b"],
    }
    assert json.loads(json.dumps(entry)) == entry
