// The TensorFusion console (docs/observability.md): read-only views of the controller's
// /api/* answers, refreshed every few seconds, and the simulate-schedule form. Every value
// from the API is put in the page as text (textContent), never as markup.
"use strict";

const REFRESH_MS = 5000;
const EXAMPLE_POD = `apiVersion: v1
kind: Pod
metadata:
  name: console-example
  namespace: default
  labels:
    tensor-fusion.ai/enabled: "true"
  annotations:
    tensor-fusion.ai/tflops-request: "10"
    tensor-fusion.ai/vram-request: 4Gi
spec:
  containers:
    - name: main
      image: busybox
`;

const UNITS = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
  n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };

/** A Kubernetes quantity ("480Gi", "312", "500m") as a number; 0 when absent or unreadable. */
function quantity(text) {
  if (text === undefined || text === null || text === "") return 0;
  const match = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(text).trim());
  if (!match) return 0;
  const factor = match[2] ? UNITS[match[2]] : 1;
  return factor === undefined ? 0 : Number(match[1]) * factor;
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
  }
  return node;
}

/** A number with at most two decimals, as text. */
function short(number) {
  return String(Math.round(number * 100) / 100);
}

/** Bytes as GiB (or MiB below one GiB). */
function bytes(number) {
  return number >= 2 ** 30 ? `${short(number / 2 ** 30)} GiB` : `${short(number / 2 ** 20)} MiB`;
}

function amount(resources) {
  if (!resources) return "–";
  const parts = [];
  if (resources.tflops) parts.push(`${short(quantity(resources.tflops))} TFLOPS`);
  if (resources.compute) parts.push(`${short(quantity(resources.compute))}% compute`);
  if (resources.vram) parts.push(`${bytes(quantity(resources.vram))} VRAM`);
  return parts.join(", ") || "–";
}

/** One capacity meter: rows of [label, value, shown text, kind], bars relative to the largest. */
function meter(rows) {
  const top = Math.max(...rows.map((row) => row[1]), 1e-12);
  const box = el("div", { className: "meter" });
  for (const [label, value, shown, kind] of rows) {
    const fill = el("div", { className: `fill ${kind}` });
    fill.style.width = `${Math.min(100, (100 * value) / top).toFixed(2)}%`;
    box.append(el("span", { className: "label", text: label }),
      el("div", { className: "track" }, fill), el("span", { className: "value", text: shown }));
  }
  return box;
}

function poolCard(pool) {
  const card = el("div", { className: "card pool", "data-pool": pool.name });
  card.append(el("h3", { text: pool.name }), el("div", {
    className: "muted",
    text: `${pool.placementMode} · ${pool.nodes} nodes · ${pool.gpus} GPUs · ${pool.workers} workers`,
  }));
  for (const [key, unit] of [["tflops", "TFLOPS"], ["vram", "VRAM"]]) {
    const physical = quantity(pool.capacity[key]);
    const virtual = quantity(pool.virtual[key]);
    const allocated = virtual - quantity(pool.virtualAvailable[key]);
    const used = physical > 0 ? (100 * allocated) / physical : 0;
    card.append(el("div", { text: `${unit}: ${used.toFixed(0)}% of physical given out` }), meter([
      ["physical", physical, key === "vram" ? bytes(physical) : short(physical), "physical"],
      ["virtual", virtual, key === "vram" ? bytes(virtual) : short(virtual), "virtual"],
      ["allocated", allocated, key === "vram" ? bytes(allocated) : short(allocated),
        allocated > physical ? "over" : "allocated"],
    ]));
  }
  return card;
}

function gpuCell(gpu) {
  const share = (key) => {
    const capacity = quantity(gpu.capacity && gpu.capacity[key]);
    const free = quantity(gpu.available && gpu.available[key]);
    return capacity > 0 ? Math.max(0, Math.min(1, (capacity - free) / capacity)) : 0;
  };
  const bar = (key) => {
    const span = el("span");
    span.style.width = `${(100 * share(key)).toFixed(1)}%`;
    return el("div", { className: `bar ${key}` }, span);
  };
  const pods = (gpu.pods || []).map((p) => `${p.namespace}/${p.name}`);
  const cell = el("div", {
    className: `gpu-cell${gpu.phase === "Running" ? "" : " down"}`, "data-gpu": gpu.name,
    title: `${gpu.name} · ${gpu.gpuModel || "unknown model"} · ${gpu.phase}\n` +
      `TFLOPS ${(100 * share("tflops")).toFixed(0)}% · VRAM ${(100 * share("vram")).toFixed(0)}%` +
      (pods.length ? `\n${pods.join("\n")}` : ""),
  }, el("div", { text: `#${gpu.index ?? "?"} ${pods.length}w` }), bar("tflops"), bar("vram"));
  return cell;
}

function replace(id, ...children) {
  const target = document.getElementById(id);
  target.replaceChildren(...children);
  return target;
}

function rows(tbodyParent, items, cells, empty) {
  const body = document.querySelector(`#${tbodyParent} tbody`);
  const out = items.map((item) => el("tr", {}, ...cells(item).map((c) =>
    el("td", {}, c))));
  if (!out.length) {
    const columns = document.querySelectorAll(`#${tbodyParent} thead th`).length;
    out.push(el("tr", {}, el("td", { className: "empty", colspan: String(columns), text: empty })));
  }
  body.replaceChildren(...out);
}

function labelsText(labels) {
  return Object.entries(labels || {}).filter(([k]) => k !== "alertname")
    .map(([k, v]) => `${k}=${v}`).join(", ");
}

async function getJSON(path) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), 10000);
  try {
    const answer = await fetch(path, { signal: controller.signal, headers: { Accept: "application/json" } });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) {
      const error = body.error || {};
      throw new Error(`${path}: ${answer.status} ${error.reason || ""} ${error.message || ""}`.trim());
    }
    return body;
  } finally {
    clearTimeout(timer);
  }
}

function showPools(body) {
  const cards = body.pools.map(poolCard);
  replace("pools", ...(cards.length ? cards : [el("p", { className: "muted", text: "No pool yet." })]));
}

function showGpus(allocation) {
  const byNode = new Map();
  for (const gpu of allocation.gpus) {
    if (!byNode.has(gpu.node)) byNode.set(gpu.node, []);
    byNode.get(gpu.node).push(gpu);
  }
  const lines = [...byNode.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([node, gpus]) =>
    el("div", { className: "node-row", "data-node": node },
      el("span", { className: "node-name mono", text: node, title: node }), ...gpus.map(gpuCell)));
  replace("gpu-map", ...(lines.length ? lines : [el("p", { className: "muted", text: "No GPU yet." })]));
}

function showWorkloads(body) {
  document.getElementById("usage-note").textContent = body.usageError
    ? `Usage unavailable: ${body.usageError}`
    : `Usage: mean per GPU over the last ${body.usageWindowSeconds / 60} minutes (tf_worker_usage).`;
  rows("workloads", body.workloads, (w) => {
    const scaling = w.autoScaling;
    const condition = scaling && scaling.condition;
    const auto = condition ? `${condition.reason}: ${condition.message || ""}` : "–";
    const recommended = scaling && scaling.recommended ? ` (recommended ${amount(scaling.recommended.requests)})` : "";
    const current = w.current || w.admitted;
    const usage = w.usage ? `${amount(w.usage)} (${w.usage.samples} samples)` : "–";
    return [`${w.namespace}/${w.name}`, w.pool || "–", String(w.workers.length),
      amount(current.requests) + recommended, amount(current.limits), usage, auto];
  }, "No TensorFusionWorkload.");
}

function showAlerts(body) {
  const firing = [];
  const history = [];
  for (const rule of body.rules || []) {
    for (const alert of rule.firing || []) firing.push({ rule: rule.name, ...alert });
  }
  for (const entry of body.history || []) history.push(entry);
  const store = body.store || {};
  const replica = body.replica || {};
  document.getElementById("alerts-note").textContent = body.running
    ? `Evaluated by ${replica.pod || "this replica"} on the ${store.kind || "?"} store` +
      (store.up === false ? ` (store down: ${store.lastError || "unknown"})` : "") + "."
    : `Rules are evaluated by the leader; this replica (${replica.pod || "?"}) is not evaluating.`;
  rows("alerts-firing", firing, (a) => [a.rule, labelsText(a.labels), a.startsAt || "–"],
    "Nothing firing.");
  rows("alerts-history", history, (a) => [a.rule, labelsText(a.labels), a.startsAt || "–",
    a.endsAt || "–"], "Nothing resolved since this replica started evaluating.");
}

async function refresh() {
  const status = document.getElementById("status");
  const problems = [];
  const parts = await Promise.allSettled([
    getJSON("/api/pools").then(showPools),
    getJSON("/api/allocation").then(showGpus),
    getJSON("/api/workloads").then(showWorkloads),
    getJSON("/api/alerts").then(showAlerts),
  ]);
  for (const part of parts) if (part.status === "rejected") problems.push(String(part.reason.message || part.reason));
  const banner = document.getElementById("problem");
  banner.hidden = !problems.length;
  banner.textContent = problems.join(" · ");
  status.textContent = problems.length ? "partly unavailable" : "live";
  status.className = `status ${problems.length ? "bad" : "good"}`;
  document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function showSimulation(body) {
  const result = body.result || {};
  const box = document.getElementById("simulate-result");
  const verdict = result.schedulable
    ? el("div", { className: "verdict yes", id: "simulate-verdict",
      text: `Schedulable: node ${result.node}, GPUs ${(result.gpus || []).join(", ")}` })
    : el("div", { className: "verdict no", id: "simulate-verdict",
      text: `Unschedulable: ${result.message || ""}` });
  const table = el("table", { id: "simulate-nodes" }, el("thead", {}, el("tr", {},
    ...["node", "rejected at", "message", "GPUs", "score"].map((h) => el("th", { text: h })))));
  const tbody = el("tbody");
  for (const node of body.nodes || []) {
    const score = node.score ? String(node.score.combined) : "–";
    tbody.append(el("tr", { className: node.selected ? "selected" : "" },
      el("td", { text: node.node }), el("td", { text: node.rejectedAt || (node.selected ? "selected" : "feasible") }),
      el("td", { text: node.message || "" }),
      el("td", { text: (node.gpus || []).map((g) => g.rejectedAt
        ? `${g.gpu}: ${g.rejectedAt} (${g.reason || ""})` : `${g.gpu}: fits`).join("; ") }),
      el("td", { text: score })));
  }
  table.append(tbody);
  const warnings = (body.warnings || []).map((w) => el("div", { className: "muted", text: `warning: ${w}` }));
  box.replaceChildren(verdict, ...warnings, table);
}

async function simulate(event) {
  event.preventDefault();
  const box = document.getElementById("simulate-result");
  const mutate = document.getElementById("simulate-mutate").checked;
  const text = document.getElementById("simulate-pod").value;
  const button = document.getElementById("simulate-submit");
  button.disabled = true;
  box.replaceChildren(el("div", { className: "muted", text: "simulating…" }));
  try {
    const kind = text.trim().startsWith("{") ? "application/json" : "application/yaml";
    const answer = await fetch(`/api/simulate-schedule?mutate=${mutate}`, {
      method: "POST", headers: { "Content-Type": kind, Accept: "application/json" }, body: text,
    });
    const body = await answer.json().catch(() => ({}));
    if (!answer.ok) {
      const error = body.error || {};
      box.replaceChildren(el("div", { className: "verdict no", id: "simulate-verdict",
        text: `${answer.status} ${error.reason || ""}: ${error.message || ""}` }));
    } else {
      showSimulation(body);
    }
  } catch (error) {
    box.replaceChildren(el("div", { className: "verdict no", id: "simulate-verdict", text: String(error) }));
  } finally {
    button.disabled = false;
  }
}

function start() {
  document.getElementById("simulate-pod").value = EXAMPLE_POD;
  document.getElementById("simulate-form").addEventListener("submit", simulate);
  let timer = null;
  const loop = async () => {
    await refresh();
    timer = document.hidden ? null : setTimeout(loop, REFRESH_MS);
  };
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) { clearTimeout(timer); timer = null; } else if (timer === null) loop();
  });
  loop();
}

document.addEventListener("DOMContentLoaded", start);
