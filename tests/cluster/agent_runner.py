"""Node agents where there is no kubelet: `tensorfusion.devenv.node_agents`, re-exported."""

from tensorfusion.devenv.node_agents import Agent, AgentRunner

__all__ = ["Agent", "AgentRunner"]
