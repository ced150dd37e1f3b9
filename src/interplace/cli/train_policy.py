"""``interplace train-policy``: train the ``rl`` placement policy on a fitted model."""

from __future__ import annotations

import argparse
import sys

from interplace.cli._common import Subparsers, count, int_at_least, seed_arg
from interplace.errors import InputError, check_output_parent, check_replaceable_dir

__all__ = ["register"]


def _run(args: argparse.Namespace) -> int:
    from interplace.model import InterferenceModel
    from interplace.placement import OBJECTIVES
    from interplace.placement.rl import POLICY_FILES, save_policy, train_policy
    from interplace.topology import load

    # save_policy refuses these too, but only after the training; say so at once.
    # (and the parent's, before the training, not after it)
    check_output_parent(check_replaceable_dir(args.out, POLICY_FILES, "an RL policy").parent)
    out = args.out  # printed as given, as the other commands print theirs
    if args.objective not in OBJECTIVES:
        raise InputError(f"unknown objective {args.objective!r} (choose from "
                         f"{', '.join(OBJECTIVES)})")
    low, high = args.min_jobs, args.jobs_per_episode
    if low > high:
        raise InputError(f"--min-jobs {low} is above --jobs-per-episode {high}")
    topology = load(args.topology)
    model = InterferenceModel.load(args.model)
    policy = train_policy(
        model,
        topology,
        episodes=args.episodes,
        jobs_per_episode=(low, high),
        rollouts=args.rollouts,
        objective=args.objective,
        max_per_gpu=args.max_per_gpu,
        seed=args.seed,
        progress=sys.stderr.isatty() and not args.quiet,
    )
    save_policy(policy, out)
    sys.stdout.write(
        f"trained on {count(args.episodes, 'episode')} x {count(args.rollouts, 'rollout')} on "
        f"{topology.name} "
        f"({'slowest job' if policy.info['objective'] == 'max-min' else 'reward per job'}, "
        f"last {count(min(20, args.episodes), 'episode')}: "
        f"{policy.info['reward_per_job_last20']:.3f}) "
        f"-> {out}\n"
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add the ``train-policy`` command to the ``interplace`` parser."""
    p = sub.add_parser(
        "train-policy",
        help="train the rl placement policy on a fitted model (no new measurements)",
        description="Train a placement policy by gradient-sampling reinforcement learning: "
        "job mixes placed by the policy are rewarded with the model's posterior draws. "
        "Writes OUT/policy.json + OUT/policy.safetensors for place --policy rl --policy-file.",
    )
    p.add_argument("--model", required=True, metavar="MODEL", help="model directory (fit)")
    p.add_argument("--topology", required=True, metavar="FILE_OR_BUILTIN",
                   help="machine(s) to train on, e.g. dgx-a100")
    p.add_argument("--out", required=True, metavar="P", help="policy directory to write")
    p.add_argument("--episodes", type=int_at_least(1), default=150,
                   help="job mixes to train on (default: 150)")
    p.add_argument("--jobs-per-episode", type=int_at_least(1), default=16, metavar="K",
                   help="most jobs per mix (default: 16)")
    p.add_argument("--min-jobs", type=int_at_least(1), default=6, metavar="K",
                   help="fewest jobs per mix (default: 6)")
    p.add_argument("--rollouts", type=int_at_least(2), default=8,
                   help="placements sampled per mix (default: 8)")
    p.add_argument("--objective", default="sum", metavar="NAME",
                   help="sum (default), max-min or risk-averse")
    p.add_argument("--max-per-gpu", type=int_at_least(1), default=2, metavar="K",
                   help="jobs per GPU at most (default: 2)")
    p.add_argument("--seed", type=seed_arg, default=0, help="random seed (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)
