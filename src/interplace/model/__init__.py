r"""The Bayesian interference model: from noisy counters to calibrated slowdown predictions.

Generative story
----------------
Jobs :math:`j = 1..J`, resources :math:`r = 1..R` (by default :data:`DEFAULT_RESOURCES`:
``gpu_compute``, ``gpu_membw``, ``pcie_h2d``, ``pcie_d2h``, ``host_cpu``), counter metrics
:math:`m = 1..M` (those of :data:`METRIC_RESOURCE` found in the data).

*Demand.* Job :math:`j` alone uses a share :math:`d_{jr} > 0` of resource :math:`r`
(1 = saturates it), drawn from a learned population per resource:

.. math::
    \mu_r \sim \mathcal N(\log 0.3,\, 1), \quad \sigma_r \sim \mathrm{LogNormal}(0, 0.5),
    \quad \log d_{jr} \sim \mathcal N(\mu_r, \sigma_r^2).

*Sensitivity.* How much job :math:`j` suffers from contention on :math:`r`, regressed on its
own demand so that a job known only from its isolated counters still gets one (cold start):

.. math::
    s_{jr} = \exp(a_r + b_r \log d_{jr} + \tau_r \epsilon_{jr}), \quad
    a_r \sim \mathcal N(0, 1.5^2),\; b_r \sim \mathcal N(0.5, 0.5^2),\;
    \tau_r \sim \mathrm{LogNormal}(\log 0.5, 0.5),\; \epsilon_{jr} \sim \mathcal N(0, 1).

*Pressure.* What counters read and what contends differ: NVML utilisation is the fraction
of time a GPU (or its memory controller) is busy, not the share of its capacity a job takes,
and jobs at the same utilisation press on a resource differently (in Lucid's data,
MobileNetV3 at batch 128 reads 100% GPU utilisation alone and leaves its partners at 0.91 of
their speed on average; DCGAN at batch 128 reads 94% and leaves them at 0.72). So the
pressure job :math:`j` puts
on :math:`r` is its demand times a job-specific intensity around 1,

.. math::
    p_{jr} = d_{jr}\, e^{\eta_{jr}}, \quad \eta_{jr} \sim \mathcal N(0, \varsigma_r^2),
    \quad \varsigma_r \sim \mathrm{LogNormal}(\log 0.3, 0.5).

Counters see :math:`d`; contention sees :math:`p`. A job known only from its isolated
counters gets its pressure with the population's spread of intensities, which keeps a cold
prediction from trusting a high utilisation reading as a saturated resource.

*Contention.* In a co-location, the load that job :math:`j`'s co-runners put on resource
:math:`r` is :math:`L_{jr} = \sum_{k} \mathrm{share}_{jkr}\, p_{kr}`, where
:math:`\mathrm{share}_{jkr} = 1` when :math:`j` and :math:`k` contend for :math:`r`: always on
one GPU, and across GPUs as the topology's shared domains say (:data:`DOMAIN_RESOURCES`:
GPUs behind one PCIe switch share its uplink, GPUs of one socket its host). The true speed
(co-located over isolated throughput) is

.. math::
    v_j = \prod_r \frac{1}{1 + s_{jr}\,\bigl[\mathrm{sp}(p_{jr} + L_{jr} - \theta_r)
          - \mathrm{sp}(p_{jr} - \theta_r)\bigr]}, \qquad
    \theta_r \sim \mathrm{LogNormal}(0, 0.3),

with :math:`\mathrm{sp}(x) = \log(1 + e^{\kappa x}) / \kappa` a smooth :math:`\max(0, x)`
(:math:`\kappa` = :data:`~interplace.model._net.KAPPA`). The bracket is the oversubscription
the co-runners add above capacity :math:`\theta_r`. So :math:`v_j \in (0, 1]`; it is 1 with no
co-runner; it never rises when a co-runner is added (every term is non-negative and grows with
:math:`L`); it stays near 1 for a job that barely uses the contended resources or for
co-runners that leave the resource under capacity ("almost no interference"); and two jobs
that each saturate the GPU (:math:`p = \theta = s = 1`) get about :math:`1/2` each, three
about :math:`1/3` ("time-slicing halves both"; 0.515 and 0.340 at the default
:math:`\kappa`, whose smooth knee adds :math:`\mathrm{sp}(0) = \log 2 / \kappa` at capacity).

*Pair term (low rank).* The mechanism explains what counters and resources can; what is
particular to a pair (two jobs whose kernels interleave badly, or unusually well) it cannot.
So each co-runner's pressure on job :math:`j` is scaled by a low-rank pair factor,

.. math::
    L_{jr} = \sum_k \mathrm{share}_{jkr}\, p_{kr}\, e^{z_{jk}}, \qquad
    z_{jk} = \sum_{l=1}^{L} u_{jl}\, w_{kl}, \quad
    u_{jl} \sim \mathcal N(0, \lambda_l^2),\; w_{kl} \sim \mathcal N(0, 1),\;
    \lambda_l \sim \mathrm{LogNormal}(\log 0.3,\, 1),

as in Bayesian probabilistic matrix factorisation (victim factors :math:`u`, aggressor factors
:math:`w`), with a shrinkage scale :math:`\lambda_l` per component, so components the data do
not support shrink to zero (the learned rank; :math:`L` = ``fit(rank=...)``, default
:data:`DEFAULT_RANK`; ``rank=0`` is the mechanism alone). Scaling pressure keeps every
guarantee above: :math:`e^{z} > 0`, so an added co-runner still only adds load and
:math:`v_j` never rises, and sharing across GPUs is scaled by what is shared exactly as the
load is. Jobs measured next to many co-runners get their pair factors from those
measurements (matrix completion inside the model); a job without co-located runs keeps the
prior (:math:`z = 0` in the mean) and so the mechanism's cold-start prediction.

*Speed measurements.* A measured speed divides a co-located throughput by the job's
measured isolated throughput, whose own error is shared by every speed of that job; so is any
cost of sharing a GPU at all (time slicing's context switches), hence a per-job level
:math:`\beta_j`:

.. math::
    \log y = \log v_j + \beta_j + \nu, \quad
    \beta_j \sim \mathcal N(0, \omega^2),\; \omega \sim \mathrm{LogNormal}(\log 0.03, 0.5),
    \quad \nu \sim \mathrm{StudentT}_4(0, \sigma_v),\; \sigma_v \sim
    \mathrm{LogNormal}(\log 0.05, 1).

Predictions are of :math:`v_j e^{\beta_j}`, the speed relative to the job's *recorded*
isolated throughput, which is what a scheduler multiplies by. The isolated runs are that
reference, not observations, so no data set separates the record's error from a cost of
sharing: only co-located speeds carry :math:`\beta_j`. A cost of sharing is never negative,
so only the part of :math:`\beta_j` above 0 can be the record's error; where no co-runner
shares the job's GPU (alone, or co-runners only on other GPUs) the level is
:math:`\max(\beta_j, 0)` (:func:`~interplace.model._net.reference_level`, in fitting and
prediction alike): a job alone runs at its record unless its co-located speeds say the record
was low, and a co-runner joining it never speeds it up. (Until format 9 a job alone was
predicted at :math:`e^{\beta_j}`, on Gavel's splits some at 0.80 (V100) to 0.56 (K80) of
their record: ``docs/benchmarks.md``, "A job alone".) The Student-t noise keeps
a few wild measurements (Lucid has speeds up to 1.5) from dragging the fit, and its learned
scale is what makes the predictive intervals calibrated.

*Second stage: measured pairs.* The structure above explains the co-located speeds only up
to a misfit (about 10% on the log scale on the public data), while a speed measured twice in
one run differs by about 1% (Lucid's replicated self-pairs). Fitted alone, it reads the misfit
as noise and shrinks every measured pair toward its own prediction. So after SVI a second,
conjugate stage (:mod:`interplace.model._cells`, ``fit(measured=True)``, the default) gives
each pair :math:`(j, k)` measured alone on one device an effect :math:`\delta_{jk}` on its
log speed, :math:`\bar y_{jk} = \bar\mu_{jk} + \delta_{jk} + \bar\varepsilon_{jk}`,
with prior mean :math:`m_{jk}` from a matrix completion of the measured residuals (biases, a
family-pair term in a fit with job families and a soft-impute low-rank term, by
cross-validation), spread :math:`\tau` (the misfit the
completion leaves) and measurement noise :math:`\sigma_m`: ``Hyper.measure_noise`` (2%), or
the spread of the pairs measured several times where it is wider (pooled, the 2% counted as
ten degrees of freedom: ``_cells.measurement_noise``):

.. math::
    \hat\delta_{jk} = m_{jk} + w_{jk} (\bar y_{jk} - \bar\mu_{jk} - m_{jk}), \quad
    w_{jk} = \frac{\tau^2}{\tau^2 + \sigma_m^2 / n_{jk}},

and :math:`\hat\delta_{jk} = m_{jk}` for a pair never measured. The effect enters as a
pressure offset :math:`c_{jk}` beside the pair term (:math:`e^{z_{jk} + c_{jk}}` scales
co-runner ``k``'s pressure on ``j``), set so the pair's posterior mean log speed is
:math:`\bar\mu_{jk} + \hat\delta_{jk}`; the guarantees above (monotone, 1 alone) hold.
A measured pair's prediction then follows :math:`\hat\delta_{jk}`: its measurement where
:math:`w_{jk}` is near 1 (Gavel: :math:`\sigma_m` = 2% against a misfit near 10%), between
the measurement and the completion where the measurement noise is of the misfit's size (Lucid,
seed 0's random split: :math:`\sigma_m` 0.026, :math:`\tau` 0.019, :math:`w` 0.36 for a pair
measured once), up to the Monte Carlo error of the
200 posterior draws the offsets are solved on (``MEASURED_DRAWS``; on Gavel's V100 data, at
20,000 prediction draws, a median miss of 0.004 in log speed and 0.04 at most, 23 of 636
pairs beyond the 2% measurement noise), and a new measurement next to a
co-runner never measured with the job gets a Student-t spread :math:`\tau` on top of
:math:`\sigma_m`. The stage is a cut (it does not feed back into the structure): fitted
jointly by SVI, the effects absorbed either everything or nothing. A job never measured as a
victim takes as its :math:`m_{jk}` the mean effect against each co-runner of its *mates*
(its family's measured members in a fit with families, or else the five measured jobs
nearest to it by isolated counters), and a job never measured as a co-runner its mates'
as co-runners (rows first, then columns; :func:`~interplace.model._cells.borrowed_effects`),
where the completion would give it the population's mean. That pair's effect is then
averaged with a *counter kernel*'s (:mod:`interplace.model._counterkernel`): a Gaussian
process regression of the measured pairs' mean log speeds on both jobs' standardised log
isolated readings, with a level of each job's own on each side,
:math:`y_c = m + f(z_{j_c}, z_{k_c}) + a_{j_c} + b_{k_c} + \varepsilon_c`, whose
length scale and spreads are chosen by cross-validation across jobs (each fold's jobs lose
every pair they are in); with :math:`\hat g_{jk}` its posterior mean and :math:`w` =
``Hyper.cold_kernel_weight`` (0.5; 0 leaves it out), the pair's offset is moved until the
posterior mean speed the model reports for it, :math:`\bar v'_{jk}`, is the weighted
geometric mean of the one it reported, :math:`\bar v_{jk}`, and the kernel's,
:math:`\log \bar v'_{jk} = (1 - w) \log \bar v_{jk} + w\, \hat g_{jk}`
(:func:`~interplace.model._cells.speed_blended`; ``info["completion"]["counter_kernel"]``),
for pairs between two jobs with every reading the kernel uses. The mechanism reads a cold
job through its fitted demand and the mates through five neighbours; the kernel reads how
pairs of jobs with such readings ran, all of them at once (on Lucid's cold-start splits,
``docs/benchmarks.md``, "The counter kernel for cold jobs").

*A direct completion.* With ``Hyper.direct_weight`` :math:`w_d > 0` (default 0.25), a pair never
measured whose victim was measured as a victim and whose co-runner as a co-runner is
averaged the same way with a matrix completion of the measured pairs' speeds themselves,
:math:`\hat D_{jk}` (biases and soft-impute with no structure under them: the
matrix-completion peer's algorithm),
:math:`\log \bar v'_{jk} = (1 - w_d) \log \bar v_{jk} + w_d \log \hat D_{jk}`
(``info["completion"]["direct"]``). The two err differently, and an exact placement follows
the largest misses: on Gavel V100's decision benchmark over sixty seeds, the placements
chosen at weight 0.25 came closer to the measured optimum than the model's own alone, by
+0.0008 of the optimum without families and +0.0006 with them (both bootstrap intervals
above 0), at a few percent of held-out MAE on Gavel (``docs/benchmarks.md``, "The direct
completion by default"); ``direct_weight=0`` leaves it out.

*Ceilings.* A speed is relative to the job's recorded isolated throughput, and every speed
of the job next to a co-runner on its GPU shares the level :math:`\beta_j` (above). Since a
co-runner never speeds a job up, a pair measured faster than that level says
:math:`\beta_j` is higher, and no pressure offset reaches it. So the stage raises
:math:`\beta_j`, in every draw, by
:math:`\ell_j = \max(0, \max_k (\bar\mu_{jk} + \hat\delta_{jk}) - \bar\beta_j)` over the
co-runners measured with ``j`` (the default; ``fit(lift_ceilings=False)`` leaves it out;
:func:`~interplace.model._cells.ceiling_lift`; ``info["ceiling_lift"]``) before the offsets
are solved: every measured target is then met, the targets themselves are unchanged, and
the job's level, its ceiling next to anyone on its GPU, rises by :math:`e^{\ell_j}` (and its
speed alone with it, where the level passes 0: a pair measured faster than the record says
the record was low). The lift
adds no information about a pair, but the structure's draws of the larger slowdown a lifted
job then needs spread wider; each unmeasured pair's effect spread narrows by as much, to
:math:`\tau_{jk}^2 = \max(\tau^2 - \tfrac{\nu - 2}{\nu} (v^\uparrow_{jk} - v_{jk}),
\tau^2 / 100)` with :math:`v` the variance of its log speed over the draws, lifted and not,
and :math:`\nu` the Student-t's degrees of freedom (whose variance is :math:`\tfrac{\nu}{\nu
- 2} \tau^2`; :func:`~interplace.model._cells.lifted_spread`), so its predictive variance is
what it was before.

*Cold jobs' demand scale.* Before that stage (``fit(cold_scale=True)``, the default;
:mod:`interplace.model._coldscale`), each job without co-located runs has its posterior mean
log demand moved, per resource a counter reads, by the median gap :math:`\log d - \log u` of
the fitted jobs minus that of the cold jobs (:math:`u` the isolated reading; medians over
readings of at least 5% of full scale), and its intensity
moved back by as much: its pressure stays where its counters put it, while its sensitivity,
regressed on log demand, is read as a fitted job's with the same counters would be; in a fit
with families, a cold job whose family has a job with co-located runs keeps its intensity,
whose centre, the family's, those jobs already set on the fitted jobs' scale. A cut
too; the gaps are in ``info["demand_gap"]`` and ``info["cold_demand_shift"]``.

*Families (optional).* Jobs often come in families: one network at several batch sizes,
with and without mixed precision. What the counters cannot pin (sensitivity, intensity, the
demand on resources without counters, the error of the isolated reference) is then alike
within a family. In Lucid's data, five of the six VGG jobs run 5-10% faster next to others
than alone: their isolated references were measured low, and only the family says so for a
new VGG job (most of what families add on Lucid's cold start is this shared reference error:
the ablation in ``docs/benchmarks.md``). Given a family :math:`f(j)` for each job
(``fit(..., family=...)``: a column of the runs table, such as Lucid's ``model``, or a
map), every per-job latent above is centred on its family's effect instead of on zero:

.. math::
    \log d_{jr} \sim \mathcal N(\mu_r + \delta^{d}_{f(j) r}, \sigma_r^2), \quad
    \epsilon_{jr} \sim \mathcal N(\delta^{s}_{f(j) r}, 1), \quad
    \eta_{jr} \sim \mathcal N(\delta^{\eta}_{f(j) r}, \varsigma_r^2), \quad
    \beta_j \sim \mathcal N(\delta^{\beta}_{f(j)}, \omega^2),

.. math::
    \delta^{x}_{f k} \sim \mathcal N(0, \lambda_{x k}^2), \quad
    \lambda_{x k} \sim \mathrm{LogNormal}(\log \lambda^0_x, 0.5), \quad
    \lambda^0 = 0.5\ (d, s),\ 0.3\ (\eta),\ 0.03\ (\beta).

A family's effects are learned from its members with co-located runs, and a job known only
from its isolated run borrows them. A job without a family keeps centre zero (the plain
prior), and without families every centre is zero, which is the model above.

*Counters.* In every run, the true utilisation of a GPU's metric :math:`m` (resource
:math:`r(m)`) is the jobs' summed demand, capped at full scale:
:math:`u = \mathrm{cap}(\sum_{k \in \text{run}} d_{k r(m)})`, where :math:`\mathrm{cap}` is
:math:`\min(1, \cdot)` with its corner rounded by a quadratic over :math:`[0.98, 1.02]`
(:func:`~interplace.model._net.smooth_cap`: a saturated counter reads exactly full scale, and
says only that the load is at least 1), and each sample is :math:`x = u + e`,
:math:`e \sim \mathcal N(0, \sigma_m^2)`, :math:`\sigma_m \sim \mathrm{LogNormal}(\log 0.05,
1)`, in units of the metric's full scale (:data:`METRIC_FULL_SCALE`). Samples enter through
their sufficient statistics per (run, device, metric), so missing samples simply drop out
(masking), and time stamps are never compared across hosts, so clock offsets cannot bias
anything. Isolated runs' counters pin each job's demand: a job at 0% GPU utilisation alone
barely competes for GPU compute.

Inference
---------
:func:`fit` runs SVI with a mean-field normal guide (``AutoNormal``) over every latent,
vectorised over observations (no Python loop over data), with Pyro parameters kept in the guide
module (``module_local_params``), a private seeded RNG, early stopping on an ELBO plateau and
a tqdm bar on request. At the first plateau the learning rate drops tenfold for 200 more
steps, which settles the noisy SVI iterates. The SVI posterior predictive is close to
calibrated on held-out speeds (median 90%-interval coverage between 85% and 95% on the
benchmark splits except K80; ``docs/benchmarks.md``), but the mean-field guide understates the
uncertainty of latent quantities such as the denoised utilisation and, most, the pair term:
on a synthetic recovery case its 90% intervals for :math:`u_j \cdot w_k` cover about 60% of
the true effects, where NUTS on the same model covers 82-88%
(``benchmarks/pair_calibration.py --nuts``); no Gaussian guide tried (low-rank joint, of rank
up to 40) does better, since the bilinear term's posterior is a curved ridge. The guide also
underfits: its ELBO prefers a speed noise at which the posterior is nearly factorised (0.24
where the data's is 0.03, on the same synthetic case; 0.10 on Gavel V100, where NUTS fits
0.01-0.02), which keeps the held-out intervals wide enough and costs accuracy: four NUTS
chains on the same model, their draws pooled, predict Gavel V100's held-out speeds 12-28%
more accurately than the SVI fit on three splits, with 90% intervals covering 88-90%
(``benchmarks/inference_gap.py --chains 4``). Single chains settle in different modes (some
worse than SVI); the gain is in averaging them, and it takes about 40 core-minutes a split.
So on small data (at most :data:`MIXTURE_MAX_SIZE` observations plus counter groups) the
default fit gets part of it at four fits' cost: :data:`MIXTURE_RESTARTS` SVI runs from
seeded starts, each fitting the power posterior :math:`p(\theta)\,p(y \mid
\theta)^{\lambda}` with :math:`\lambda` = :data:`MIXTURE_TEMPER` (both likelihoods count
1.5 times, which narrows each component), kept as an equal-weight mixture of the four
mean-field posteriors (:attr:`InterferenceModel.components`; draw :math:`s` comes from
component :math:`s \bmod K`), the second stage computed from the mixture's draws. On Gavel
(ten splits per GPU, with and without families) its held-out MAE is 8-19% below one fit's
(medians per split; lower on 58 of 60 splits) and its 90% intervals are calibrated
(``docs/benchmarks.md``). It does not mend the pair effects' intervals: on the synthetic
recovery sets they cover 38-59% (one fit: 56-62%). Larger data, such as Lucid's, where neither
restarts nor tempering changed the accuracy, gets one plain fit (``fit(restarts=1)`` asks for
it anywhere). Exact inference is an opt-in for offline fits: ``fit(nuts=Nuts(...))``
replaces the SVI posterior by pooled NUTS chains (:class:`Nuts`), whose 90% intervals cover
the recovery sets' true pair effects at the nominal rate (0.88 and 0.94), at about 11 minutes
a fit on two cores for Gavel's 26 jobs, and predict Gavel V100's held-out speeds 4-14% more
accurately than the default fit (K80 1.5% more, P100 2% less; one split each).

What it answers
---------------
- :meth:`InterferenceModel.posterior_speed`: the posterior predictive speed of thousands of
  proposed co-locations (:class:`Query`, any number of co-runners) at once; mean, quantiles and
  draws. :meth:`InterferenceModel.predict` for one.
- Cold start: a job with only an isolated run (and its counters) in the fit data gets
  predictions for any co-location, through its counter-informed demand, the population's
  spread of intensities and the sensitivity regression, and its family's effects where
  families are given.
- :meth:`InterferenceModel.utilisation`: the posterior true utilisation behind each run's
  counters (denoised counters).
- :meth:`InterferenceModel.save` / :meth:`InterferenceModel.load`: safetensors + JSON, never
  pickle (the measured pairs and offsets of the second stage included).
- :func:`evaluate`: held-out accuracy and calibration against simple baselines.

>>> from interplace.datasets import synthetic
>>> data = synthetic(4, seed=0, samples_per_run=5)
>>> model = fit(data, seed=0, steps=100, min_steps=100)
>>> p = model.posterior_speed([Query("job0", ("job1",)), Query("job0", ("job1", "job2"))])
>>> bool(p.mean[1] <= p.mean[0])  # another co-runner never speeds a job up
True
"""

from interplace.model._data import (
    DEFAULT_RESOURCES,
    METRIC_FULL_SCALE,
    METRIC_RESOURCE,
    job_families,
)
from interplace.model._evaluate import (
    baselines,
    best_baseline,
    co_runner_lists,
    cold_split,
    colocated_rows,
    evaluate,
    family_lookup,
    holdout_split,
    row_queries,
    score,
    solo_gpu_util,
)
from interplace.model._fit import (
    DEFAULT_RANK,
    MIXTURE_MAX_SIZE,
    MIXTURE_RESTARTS,
    MIXTURE_TEMPER,
    fit,
)
from interplace.model._fitted import FORMAT_VERSION, InterferenceModel, Query, SpeedPosterior
from interplace.model._net import Hyper
from interplace.model._nuts import Nuts
from interplace.model._peers import (
    PEERS,
    BoostedPeer,
    SoftImpute,
    fit_boosted_trees,
    fit_ebm,
    fit_soft_impute,
    peer_maes,
)
from interplace.model._stability import (
    PERTURBATIONS,
    JobStability,
    Replicate,
    StabilityReport,
    stability,
)
from interplace.model._topo import DOMAIN_RESOURCES, shared_resources

__all__ = [
    "DEFAULT_RANK",
    "DEFAULT_RESOURCES",
    "DOMAIN_RESOURCES",
    "FORMAT_VERSION",
    "METRIC_FULL_SCALE",
    "METRIC_RESOURCE",
    "MIXTURE_MAX_SIZE",
    "MIXTURE_RESTARTS",
    "MIXTURE_TEMPER",
    "PEERS",
    "PERTURBATIONS",
    "BoostedPeer",
    "Hyper",
    "InterferenceModel",
    "JobStability",
    "Nuts",
    "Query",
    "Replicate",
    "SoftImpute",
    "SpeedPosterior",
    "StabilityReport",
    "baselines",
    "best_baseline",
    "co_runner_lists",
    "cold_split",
    "colocated_rows",
    "evaluate",
    "family_lookup",
    "fit",
    "fit_boosted_trees",
    "fit_ebm",
    "fit_soft_impute",
    "holdout_split",
    "job_families",
    "peer_maes",
    "row_queries",
    "score",
    "shared_resources",
    "solo_gpu_util",
    "stability",
]
