"""The load generator: what Locust runs in its own processes, here or on another host, never
imported by the harness or a notebook. ``locustfile`` is the file Locust loads (harness/run/load.py
names it); it reads the run's LoadSettings and puts together ``rows`` (each request's raw row,
its error classed), ``schedule`` (the open-loop arrivals), ``shapes`` (the three load shapes),
``users`` (the user class) and ``request_ids`` (each request's id, in its header and body). Besides Locust and gevent they import only
the standard library, harness.files.producers and harness.model (no pandas: every process
imports them)."""
