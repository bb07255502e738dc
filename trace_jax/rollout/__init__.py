"""Rollout trees and the agent loop that grows them."""
