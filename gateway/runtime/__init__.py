"""The TP=2 vLLM backend's runtime: profiles, the rendered ``vllm serve`` command, the safety checker.

``runtime/`` at the repository root holds the compose file, the node env templates and the profiles
these functions read; docs/stability.md explains the rules.
"""

from gateway.runtime.check import Problem, check
from gateway.runtime.defaults import GatewayDefaults, gateway_defaults
from gateway.runtime.profile import NodeEnv, ProfileError, RuntimeProfile, load_node_env, load_profile
from gateway.runtime.render import render, render_env, shell_command

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
