"""The Berkeley Function Calling Leaderboard in one place: `single_turn.py` (BFCL v4/v3 single-turn files and the
AST check), `multi_turn.py` (the multi-turn subsets' files, the official stateful backends per episode, the
official multi-turn verdict) and `multi_turn_source.py` (those tasks as RL episodes: the task source and env)."""
