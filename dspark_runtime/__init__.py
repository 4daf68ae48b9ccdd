"""The TP=2 vLLM backend's runtime: profiles, the rendered ``vllm serve`` command, the safety checker.

The profiles ship in ``profiles/`` here; ``runtime/`` at the repository root holds the compose file
and the node env templates these functions read; docs/stability.md explains the rules.
"""

from dspark_runtime.check import Problem, check
from dspark_runtime.defaults import GatewayDefaults, gateway_defaults
from dspark_runtime.profile import NodeEnv, ProfileError, RuntimeProfile, load_node_env, load_profile
from dspark_runtime.render import render, render_env, shell_command

__all__ = [
    "GatewayDefaults",
    "NodeEnv",
    "Problem",
    "ProfileError",
    "RuntimeProfile",
    "check",
    "gateway_defaults",
    "load_node_env",
    "load_profile",
    "render",
    "render_env",
    "shell_command",
]
