"""One host's processes and their samples: starting and stopping process groups, waiting for
ports, the 1-second RSS/CPU samplers. Used by run/ on this host and by remote/ on the others."""
