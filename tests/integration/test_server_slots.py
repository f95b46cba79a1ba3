"""llama-server's slot actions (issue #31): `--slot-save-path` and POST
/slots/{id}?action=save|restore|erase, and `id_slot` pinning a request to a slot. A slot
saved and restored into another slot is reused there as a cached prefix and answers as the
first did; erase forgets the prefix; bad names, files, slots and actions are clear 4xx/5xx
answers that change nothing."""
import os

import pytest
import requests

from serverutil import Server

P1 = "The old lighthouse keeper climbed the stairs every evening and looked out over the grey sea, where"
P2 = P1 + " the ships"


@pytest.fixture(scope="module")
def saves(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def srv(saves):
    s = Server(["-np", "2", "-c", "1024", "--temp", "0", "--slot-save-path", str(saves)])
    yield s
    assert s.stop()[0] == 0


def complete(srv, prompt, slot, n=8):
    r = requests.post(srv.url + "/completion", json={"prompt": prompt, "n_predict": n, "id_slot": slot,
                                                     "cache_prompt": True}, timeout=300)
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["id_slot"] == slot
    return j


def action(srv, slot, what, **body):
    return requests.post(f"{srv.url}/slots/{slot}?action={what}", json=body or None, timeout=300)


def test_save_restore_reuses_the_prefix(srv, saves):
    action(srv, 0, "erase")
    action(srv, 1, "erase")
    first = complete(srv, P1, 1)
    n_prompt = first["timings"]["prompt_n"]
    assert n_prompt == first["tokens_evaluated"] > 10  # all of it read
    r = action(srv, 1, "save", filename="one.bin")
    assert r.status_code == 200, r.text
    j = r.json()
    n_saved = j["n_saved"]
    assert j["id_slot"] == 1 and j["filename"] == "one.bin"
    assert j["n_saved"] >= n_prompt and j["n_written"] == os.path.getsize(saves / "one.bin")
    assert "save_ms" in j["timings"]
    assert not [f for f in os.listdir(saves) if f.endswith(".tmp")]
    again = complete(srv, P2, 1)
    tail = again["timings"]["prompt_n"]
    assert tail < n_prompt / 2  # the saved prefix was reused on slot 1
    r = action(srv, 0, "restore", filename="one.bin")
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["n_restored"] == n_saved and j["n_read"] == os.path.getsize(saves / "one.bin")
    assert "restore_ms" in j["timings"]
    moved = complete(srv, P2, 0)
    assert moved["timings"]["prompt_n"] == tail  # slot 0 reuses the restored prefix as slot 1 did
    assert moved["content"] == again["content"]  # ... and answers the same
    slots = requests.get(srv.url + "/slots", timeout=30).json()
    assert slots[0]["n_past"] > n_prompt


def test_restore_matches_save_count(srv):
    action(srv, 1, "erase")
    complete(srv, P1, 1)
    saved = action(srv, 1, "save", filename="two.bin").json()["n_saved"]
    assert action(srv, 0, "restore", filename="two.bin").json()["n_restored"] == saved


def test_erase_forgets_the_prefix(srv):
    first = complete(srv, P1, 1)
    r = action(srv, 1, "erase")
    assert r.status_code == 200, r.text
    assert r.json()["id_slot"] == 1 and r.json()["n_erased"] > 0
    again = complete(srv, P1, 1)
    assert again["timings"]["prompt_n"] == again["tokens_evaluated"]
    assert again["content"] == first["content"]


def test_bad_requests(srv, saves):
    complete(srv, P1, 0)
    for name in ["../escape.bin", "a/b.bin", "", " x.bin", "x.", "x\u0001.bin"]:
        r = action(srv, 0, "save", filename=name)
        assert r.status_code == 400 and "Invalid filename" in r.text, name
    assert action(srv, 0, "save").status_code == 400  # no filename
    assert not os.path.exists(os.path.dirname(str(saves)) + "/escape.bin")
    assert action(srv, 0, "frobnicate", filename="x.bin").status_code == 400
    assert action(srv, 7, "save", filename="x.bin").status_code == 400
    assert requests.post(srv.url + "/slots/x?action=erase", timeout=30).status_code == 400
    assert requests.get(srv.url + "/slots/0?action=erase", timeout=30).status_code == 405
    r = action(srv, 0, "restore", filename="missing.bin")
    assert r.status_code == 400 and "missing.bin" in r.text
    (saves / "junk.bin").write_bytes(os.urandom(4096))
    r = action(srv, 0, "restore", filename="junk.bin")
    assert r.status_code == 400 and "not a saved sequence" in r.text
    # a good file cut short: refused, and the slot is left empty (all of the prompt read again)
    assert action(srv, 0, "save", filename="whole.bin").status_code == 200
    data = (saves / "whole.bin").read_bytes()
    (saves / "short.bin").write_bytes(data[: len(data) // 2])
    r = action(srv, 1, "restore", filename="short.bin")
    assert r.status_code == 400 and "cut short" in r.text
    j = complete(srv, P1, 1)
    assert j["timings"]["prompt_n"] == j["tokens_evaluated"]
    r = requests.post(srv.url + "/completion", json={"prompt": P1, "n_predict": 2, "id_slot": 2}, timeout=60)
    assert r.status_code == 400 and "id_slot" in r.text


def test_without_the_flag(tmp_path):
    s = Server(["-np", "1", "-c", "512"])
    try:
        r = requests.post(s.url + "/slots/0?action=erase", timeout=30)
        assert r.status_code == 501 and "--slot-save-path" in r.text
    finally:
        assert s.stop()[0] == 0


def test_the_folder_is_made(tmp_path):
    where = tmp_path / "a" / "b"
    s = Server(["-np", "1", "-c", "512", "--slot-save-path", str(where)])
    try:
        complete(s, P1, 0, n=2)
        assert action(s, 0, "save", filename="s.bin").status_code == 200
        assert (where / "s.bin").is_file()
    finally:
        assert s.stop()[0] == 0
