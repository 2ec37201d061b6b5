"""A seeded genetic search over GPU counts: the yardstick for Pollux's exact count optimiser.

Pollux searches allocations with NSGA-II (population 100, elitist, tournament selection,
crossover, mutation and a repair step that keeps a plan within the cluster). With the one
objective the artifact's simulator ranks by, NSGA-II reduces to this elitist genetic algorithm.
`pollux.optimise_counts` replaces it in the policy; tests run both on the same inputs to show the
replacement never finds a worse plan.
"""

from __future__ import annotations

import numpy as np


def genetic_counts(
    costs: list[np.ndarray],
    capacity: int,
    seed: int = 0,
    population: int = 100,
    generations: int = 100,
) -> list[int]:
    """Counts minimising sum_j costs[j][n_j] with sum_j n_j <= capacity, by evolution."""
    rng = np.random.default_rng(seed)
    jobs = len(costs)
    limits = np.array([len(c) - 1 for c in costs])
    table = np.full((jobs, limits.max() + 1), np.inf)
    for j, cost in enumerate(costs):
        table[j, : len(cost)] = cost
    rows = np.arange(jobs)

    def fitness(pop: np.ndarray) -> np.ndarray:
        return table[rows[None, :], pop].sum(axis=1)

    def repair(pop: np.ndarray) -> np.ndarray:
        # scale an over-full plan down in proportion (floor), which always fits the cluster
        total = pop.sum(axis=1, keepdims=True)
        scale = np.minimum(1.0, capacity / np.maximum(total, 1))
        return np.floor(pop * scale).astype(pop.dtype)

    pop = repair(rng.integers(0, limits + 1, size=(population, jobs)))
    pop[0] = 0
    pop[0, : min(jobs, capacity)] = 1  # one GPU each, oldest first: a sensible seed
    score = fitness(pop)
    for _ in range(generations):
        a, b = rng.integers(0, population, size=(2, population))
        parents = np.where((score[a] <= score[b])[:, None], pop[a], pop[b])
        mates = parents[rng.permutation(population)]
        child = np.where(rng.random((population, jobs)) < 0.5, parents, mates)
        mutate = rng.random((population, jobs)) < 1.0 / jobs
        child = np.where(mutate, rng.integers(0, limits + 1, size=(population, jobs)), child)
        child = repair(child)
        merged = np.vstack([pop, child])
        merged_score = np.concatenate([score, fitness(child)])
        keep = np.argsort(merged_score, kind="stable")[:population]
        pop, score = merged[keep], merged_score[keep]
    return [int(n) for n in pop[0]]
