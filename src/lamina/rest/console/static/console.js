// lamina console: the actions (POSTs with the API token in a header, never a cookie;
// reads carry the sign-in cookie when the server keeps them closed) and the SQL box. Every value is written as text (textContent), never as HTML.
"use strict";

const TOKEN_KEY = "lamina-console-token";

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function say(text, isError) {
  const el = document.getElementById("status");
  if (!el) return;
  el.textContent = text;
  el.className = isError ? "error" : "ok";
}

function detailOf(body, status) {
  let d = body && body.detail;
  if (Array.isArray(d)) d = d.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
  if (status === 401 || status === 403) {
    d = `${d || "refused"} — enter the API token at the top of the page`;
  }
  return d || `HTTP ${status}`;
}

async function call(method, url, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && token()) headers.Authorization = `Bearer ${token()}`;
  const r = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: method === "GET" ? "same-origin" : "omit",
  });
  let json = null;
  try {
    json = await r.json();
  } catch (e) {
    json = null;
  }
  return { ok: r.ok, status: r.status, json };
}

function confirmDialog(title, text, okLabel) {
  const dlg = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-ok").textContent = okLabel;
  return new Promise((resolve) => {
    dlg.addEventListener("close", () => resolve(dlg.returnValue === "ok"), { once: true });
    dlg.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}

function tableUrl(table, rest) {
  return `/tables/${encodeURIComponent(table)}/${rest}`;
}

async function revert(button) {
  const { table, entry, force } = button.dataset;
  const q = `segmentLineageEntryId=${encodeURIComponent(entry)}`;
  const preview = await call("GET", tableUrl(table, `revertPreview?${q}`));
  if (!preview.ok) return say(detailOf(preview.json, preview.status), true);
  const p = preview.json;
  const text =
    `After the revert of entry ${p.segmentLineageEntryId} (${p.state}), ${p.summary}. ` +
    `Rows there now: ${p.rowsNow}; after: ${p.rowsAfter}.`;
  if (!(await confirmDialog("Revert this lineage entry?", text, "Revert"))) {
    return say("Revert cancelled.");
  }
  const r = await call("POST", tableUrl(table, `revertReplaceSegments?${q}&forceRevert=${force}`));
  if (!r.ok) return say(detailOf(r.json, r.status), true);
  say(`Entry ${entry} is ${r.json.state}.`);
  setTimeout(() => location.reload(), 400);
}

async function compact(button) {
  const { table, interval, mode } = button.dataset;
  const body = { mode: mode === "major" ? "major" : "minor" };
  if (interval) body.interval = interval;
  button.disabled = true;
  say(`Compacting ${interval || "the whole table"}…`);
  const r = await call("POST", tableUrl(table, "compact"), body);
  button.disabled = false;
  if (!r.ok) return say(detailOf(r.json, r.status), true);
  const j = r.json;
  say(
    j.commitId === null
      ? "Nothing to compact."
      : `Compacted in commit ${j.commitId}: ${j.segmentsBefore} → ${j.segmentsAfter} segments.`
  );
  setTimeout(() => location.reload(), 400);
}

let lastResult = null;

function csvCell(v) {
  const s = v === null ? "" : typeof v === "object" ? JSON.stringify(v) : String(v);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

function showResult(res) {
  const table = document.getElementById("result");
  const head = table.tHead;
  const body = table.tBodies[0];
  head.replaceChildren();
  body.replaceChildren();
  const tr = document.createElement("tr");
  for (const c of res.columns) {
    const th = document.createElement("th");
    th.scope = "col";
    th.textContent = c.name;
    th.title = c.type;
    tr.appendChild(th);
  }
  head.appendChild(tr);
  for (const row of res.rows) {
    const r = document.createElement("tr");
    for (const v of row) {
      const td = document.createElement("td");
      td.textContent = v === null ? "NULL" : typeof v === "object" ? JSON.stringify(v) : String(v);
      if (v === null) td.className = "null";
      r.appendChild(td);
    }
    body.appendChild(r);
  }
  document.getElementById("sql-meta").textContent =
    `${res.rows.length} rows${res.truncated ? " (row limit reached: more left out)" : ""} ` +
    `in ${res.elapsedMs.toFixed(0)} ms`;
}

async function runSql(form) {
  const err = document.getElementById("sql-error");
  err.hidden = true;
  const body = {
    query: form.query.value,
    maxRows: Number(form.maxRows.value),
    timeoutS: Number(form.timeoutS.value),
  };
  document.getElementById("sql-meta").textContent = "Running…";
  const r = await call("POST", "/sql", body);
  if (!r.ok) {
    document.getElementById("sql-meta").textContent = "";
    err.textContent = detailOf(r.json, r.status);
    err.hidden = false;
    document.getElementById("csv").disabled = true;
    return;
  }
  lastResult = r.json;
  showResult(r.json);
  document.getElementById("csv").disabled = false;
}

function downloadCsv() {
  if (!lastResult) return;
  const lines = [lastResult.columns.map((c) => csvCell(c.name)).join(",")];
  for (const row of lastResult.rows) lines.push(row.map(csvCell).join(","));
  const url = URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "text/csv" }));
  const a = document.createElement("a");
  a.href = url;
  a.download = "lamina-query.csv";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  const login = document.getElementById("login-form");
  if (login) {
    // the cookie opens reads only: keep the token in this tab for the actions too
    login.addEventListener("submit", () => sessionStorage.setItem(TOKEN_KEY, login.token.value));
  }
  const t = document.getElementById("token");
  if (t) {
    t.value = token();
    t.addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, t.value));
    document.getElementById("token-form").addEventListener("submit", (e) => e.preventDefault());
  }
  for (const b of document.querySelectorAll("button.revert")) {
    b.addEventListener("click", () => revert(b));
  }
  for (const b of document.querySelectorAll("button.compact")) {
    b.addEventListener("click", () => compact(b));
  }
  // SVG links: Chromium does not follow them on Enter by itself
  for (const a of document.querySelectorAll("#timeline a.bucket")) {
    a.addEventListener("keydown", (e) => {
      if (e.key === "Enter" || e.key === " ") {
        e.preventDefault();
        location.href = a.getAttribute("href");
      }
    });
  }
  const form = document.getElementById("sql-form");
  if (form) {
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      runSql(form);
    });
    form.query.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
        e.preventDefault();
        runSql(form);
      }
    });
    document.getElementById("csv").addEventListener("click", downloadCsv);
  }
});
