"""The file Locust loads (harness/run/load.py starts it, with this repository on PYTHONPATH):
the run's settings from the load.json named by SLUICE_LOAD_FILE (harness.model.load_settings),
the pieces of harness.run.loadgen bound to them, and Locust's events wired to them. Locust
finds the user class and the one shape by their names here."""
import os
import socket

from locust import events

from harness.files import producers
from harness.model.inflight import abandons
from harness.run.loadgen import abandon, request_ids, rows, schedule, shapes, users

SETTINGS = producers.read_load_settings(os.environ["SLUICE_LOAD_FILE"])
# The topology's name for this host (harness/run/load.py sets it); pids are unique only per host.
HOSTNAME = os.environ.get("SLUICE_WORKER_HOST") or socket.gethostname()

ROWS = rows.RawRows(SETTINGS, HOSTNAME)
CPU_WARNINGS = rows.CpuWarnings(SETTINGS.raw_dir, HOSTNAME)
IDS = request_ids.RequestIds(SETTINGS)
SCHEDULE = schedule.Schedule.of(SETTINGS)
USERS = shapes.UsersRecord(SETTINGS.raw_dir)
# the in-flight lane's open streams, in a streamed run that leaves some
STREAMS = abandon.Streams(SETTINGS.seed) if abandons(SETTINGS.load) else None
ChatUser = users.user_class(SETTINGS, IDS, ROWS, SCHEDULE, STREAMS)
StudyShape = shapes.shape_class(SETTINGS, USERS, SCHEDULE)

events.request.add_listener(ROWS.on_request)


@events.init.add_listener
def on_init(environment, **kwargs):
    # each process's own: Locust's --processes forks after this file is imported
    ROWS.runner = environment.runner
    ROWS.open()
    IDS.begin()
    if STREAMS is not None and environment.runner is not None:
        # the shape (Locust's master, or the one local process) tells every process when
        environment.runner.register_message(abandon.MESSAGE, STREAMS.on_message)


@events.cpu_warning.add_listener
def on_cpu_warning(environment, cpu_usage, **kwargs):
    CPU_WARNINGS.add(cpu_usage)


@events.quitting.add_listener
def on_quitting(environment, **kwargs):
    ROWS.on_quitting()
    if CPU_WARNINGS.record["count"]:
        CPU_WARNINGS.write()
    USERS.close()
