"""The options every study-running command shares: --profile, --gateways, --set."""
from __future__ import annotations

import argparse

from harness.model import config as config_mod
from harness.model.config import ConfigError, StudyConfig


def add_study_options(parser: argparse.ArgumentParser, profile: str = "standard") -> None:
    parser.add_argument("--profile", default=profile, choices=sorted(config_mod.PROFILES),
                        help="the preset the settings start from (default: %(default)s)")
    parser.add_argument("--gateways", default=None, metavar="A,B|all",
                        help="comma-separated system names, or 'all'; default: the profile's own "
                             "set, else every system under gateways/")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="override a StudyConfig field, e.g. --set runs_per_gateway=1 "
                             "(JSON values; repeatable)")


def study_config(args: argparse.Namespace, **fixed) -> StudyConfig:
    """The StudyConfig these options describe (with a study_id); ConfigError for a value that is
    not of its setting's type. The study's preflight (harness/run/preflight.py) judges the rest."""
    overrides = config_mod.parse_overrides(args.set)
    if args.gateways is not None:
        if "gateways" in overrides:
            raise ConfigError(["gateways: given both by --gateways and by --set gateways=...; "
                               "use one"])
        overrides["gateways"] = args.gateways
    return config_mod.from_profile(args.profile, **{**fixed, **overrides}).with_study_id()
