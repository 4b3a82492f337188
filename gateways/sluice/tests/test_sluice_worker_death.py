"""A worker killed with SIGKILL (as the OOM killer kills), whichever it is, while the others serve:
the key's rate-limit window and token budget read the same before and after (its requests stay
counted, its reservation is charged, its leases come back), the other workers keep answering, the
dead one is restarted, and SIGTERM to the main pid still stops every process."""
import http.client
import json
import os
import signal
import threading
import time
from types import SimpleNamespace

import psutil
import pytest
from sluice_helpers import ENV, MSG, chat, server_config
from sluice_scripted_provider import ScriptedProvider
from sluice_stub import wait_until

from sluice.keys import KeyStore, release_worker
from sluice.shared import Shared

pytestmark = pytest.mark.integration

KEY = "sk-test-dying"
# the stub's usage for one unary chat: 11 prompt and 5 completion tokens
TOKENS_PER_CHAT = 16
# chats the victim answers after the state is read: it dies holding fresh, partly used leases
VICTIM_CHATS = 5
# how long the provider of the victim's request in flight stays silent, unless Sluice closes first
HOLD_S = 60


@pytest.fixture
def holder():
    """A provider that never answers: it holds each request until Sluice closes the connection."""
    p = ScriptedProvider(lambda p, c, head, body: p.hold(c, HOLD_S))
    yield p
    p.close()


def _config(stub_url, holder_url, workers):
    # room enough for large leases: each claim takes 1/(2 x workers) of what is free
    extra = (f'\n[keys.dying]\nkey = "{KEY}"\nrpm = 100000\ntoken_budget = 100000000\n'
             f'\n[providers.holder]\nbase_url = "{holder_url}/v1"\napi_key = "sk-holder"\n'
             f'\n[models.silent]\nprovider = "holder"\n')
    return server_config(stub_url, extra=extra).replace("workers = 1", f"workers = {workers}")


def _get_json(conn, path):
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200, body
    return json.loads(body)


def _chat(conn, model="fast"):
    conn.request("POST", "/v1/chat/completions", json.dumps({"model": model, "messages": MSG}),
                 {"content-type": "application/json", "authorization": f"Bearer {KEY}"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _pinned(port, index):
    """A keep-alive connection that worker ``index`` accepted (once it listens), and its pid."""
    found = []

    def reached():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        state = _get_json(conn, "/debug/state")
        if state["worker"] == index:
            found.append((conn, state["pid"]))
            return True
        conn.close()
        return False
    assert wait_until(reached, timeout=20), f"no connection reached worker {index}"
    return found[0]


def _alive(proc):
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _key_state(conn):
    return _get_json(conn, "/debug/state")["keys"]["dying"]


def _quiet_state(conn, reserved):
    """The key's state once every worker has given its leases back and published (once a second),
    with tokens in flight (``reserved``) or none."""
    got = {}

    def quiet():
        got.update(_key_state(conn))
        return got["requests_leased"] == 0 and got["tokens_leased"] == 0 and (got["tokens_reserved"] > 0) == reserved
    assert wait_until(quiet, timeout=10), got
    return dict(got)


def _counted(before, after, chats):
    """Requests counted over the current and the previous rpm window: what ``before`` read plus
    ``chats``, whether or not a minute began in between."""
    assert after["rpm_window"] - before["rpm_window"] in (0, 1)
    carried = before["previous_window_requests"] if after["rpm_window"] == before["rpm_window"] else 0
    return after["requests"] + after["previous_window_requests"], before["requests"] + carried + chats


@pytest.mark.parametrize("workers,victim", [(2, 0), (2, 1), (3, 2)])
def test_a_killed_worker_loses_no_budget_or_window(make_sluice, stub, holder, workers, victim):
    gw = make_sluice(_config(stub.url, holder.url, workers), env=ENV)
    main = psutil.Process(gw.proc.pid)
    conns, pids = {}, {}
    for i in range(workers):
        conns[i], pids[i] = _pinned(gw.port, i)
    survivors = [i for i in range(workers) if i != victim]
    watcher, _ = _pinned(gw.port, survivors[0])  # reads the key's state throughout

    # every worker counts and spends; then the victim takes a request it will not finish
    for i in range(workers):
        for _ in range(10):
            assert _chat(conns[i]) == 200
    slow_answer = []

    def slow_chat():
        try:
            slow_answer.append(_chat(conns[victim], "silent"))
        except OSError as e:
            slow_answer.append(e)

    slow = threading.Thread(target=slow_chat)
    slow.start()
    before = _quiet_state(watcher, reserved=True)
    chats = 0

    # the victim claims new leases, then dies with them partly used and a request in flight
    victim_conn, _ = _pinned(gw.port, victim)
    for _ in range(VICTIM_CHATS):
        assert _chat(victim_conn) == 200
        chats += 1
    oks = [0] * len(survivors)  # each driver counts its own answers
    load = {"failed": [], "stop": False}

    def drive(n, conn):
        while not load["stop"]:
            try:
                status = _chat(conn)
            except (OSError, http.client.HTTPException) as e:
                status = repr(e)
                load["stop"] = True  # the connection is unusable now
            if status == 200:
                oks[n] += 1
            else:
                load["failed"].append(status)

    drivers = [threading.Thread(target=drive, args=(n, conns[i])) for n, i in enumerate(survivors)]
    for t in drivers:
        t.start()
    try:
        assert wait_until(lambda: sum(oks) >= 5, timeout=10)
        os.kill(pids[victim], signal.SIGKILL)
        ok_at_kill = sum(oks)

        # the others keep answering, on their connections and on new ones
        assert wait_until(lambda: sum(oks) >= ok_at_kill + 10 or load["failed"], timeout=10)
        assert load["failed"] == [] and _alive(main)
        assert chat(gw.port, {"model": "fast", "messages": MSG}, key=KEY)[0] == 200
        chats += 1
        slow.join(10)
        assert len(slow_answer) == 1 and isinstance(slow_answer[0], OSError), slow_answer

        # the dead worker is restarted, and serves
        _, new_pid = _pinned(gw.port, victim)
        assert new_pid != pids[victim]
        assert "exited with -9; restarting" in gw.output()
    finally:
        load["stop"] = True
        for t in drivers:
            t.join(10)
    assert load["failed"] == []
    chats += sum(oks)

    # nothing was lost: requests still counted, tokens spent, and the reservation in flight charged
    after = _quiet_state(watcher, reserved=False)
    counted, expected = _counted(before, after, chats)
    charged = before["tokens_spent"] + before["tokens_reserved"] + TOKENS_PER_CHAT * chats
    assert (counted, after["tokens_spent"]) == (expected, charged), (before, after, chats)

    # SIGTERM to the main pid stops everyone, and nothing is left behind
    tree = main.children(recursive=True)
    assert len(tree) == workers
    for c in list(conns.values()) + [watcher, victim_conn]:
        c.close()
    assert gw.stop() == 0
    assert wait_until(lambda: not any(_alive(p) for p in tree), timeout=10)


@pytest.mark.parametrize("later_period", [False, True])
def test_a_dead_workers_reservation_is_charged_in_the_period_of_its_death(later_period):
    # in-process, over one shared memory: the supervisor's part alone, at a wall time of the test's
    # choosing (a day's period: the test does not cross its end)
    period_s = 86400
    key = SimpleNamespace(name="k", key="sk-k", key_sha256=None, models=["*"], rpm=0, token_budget=10000,
                          budget_period_s=period_s, max_in_flight=0)
    shared = Shared(1, 2)
    survivor, dying = (KeyStore({"k": key}, shared, w, 2) for w in range(2))
    rec = dying.lookup(b"sk-k")
    assert dying.reserve(rec, 100) == 0
    dying.settle(rec, 100, 40)   # spent in the period it ran in
    dying.return_leases()        # and published, as every second
    assert dying.reserve(rec, 300) == 0  # in flight when it dies
    wall = time.time() + (period_s if later_period else 0)
    release_worker(shared.q, [period_s], 2, 1, wall)
    spent, reserved = survivor.budget_state(survivor.lookup(b"sk-k"), wall)
    # in a later period only the charge for the request in flight is there: the 40 ran before it
    assert (spent, reserved) == (300 if later_period else 340, 0)
    restarted = KeyStore({"k": key}, shared, 1, 2)
    again = restarted.lookup(b"sk-k")
    assert (again.budget_period_index, again.spent) == (int(wall // period_s), spent)
