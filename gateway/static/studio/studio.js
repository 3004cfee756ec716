// The tenant studio: sign in, upload a reference image straight to storage, create a generation
// (one Idempotency-Key per submission, reused on every retry), follow it live, play it.
// Plain ES module, no build step, no dependency. Talks to /v1 only (and to presigned upload URLs).

const $ = (id) => document.getElementById(id);
const SESSION = "reelqueue.session"; // sessionStorage: the session token (never the API key)
const CURRENT = "reelqueue.current"; // sessionStorage: the generation on screen, reopened on reload
const TERMINAL = new Set(["SUCCEEDED", "CANCELED", "REJECTED", "FAILED_FINAL", "EXPIRED"]);
const MAX_IMAGE_BYTES = 25 * 1024 * 1024;
const RETRIES = 6; // a create or a PUT retried this many times on a network error, 5xx or 429
const POLL_MS = 2000;

let session = readSession();
let assetId = null;
let pending = null; // the submission in flight or awaiting a retry: {json, key, promise}
let follower = null;
let nextCursor = null;

// ---- errors ------------------------------------------------------------------------------------
class Problem extends Error {
  constructor(status, type, title, detail, retryAfter) {
    super(detail || title);
    Object.assign(this, { status, type, title, detail, retryAfter });
  }
  get retryable() { return this.status === 0 || this.status === 429 || this.status >= 500; }
}

async function problemOf(res) {
  let body = {};
  try { body = await res.json(); } catch { /* not problem+json */ }
  return new Problem(res.status, body.type || "about:blank", body.title || res.statusText, body.detail || "",
    Number(res.headers.get("retry-after")) || 0);
}

// Checked here before anything is sent: named with the problem type the API gives the same refusal.
function localProblem(status, slug, title, detail) {
  return new Problem(status, `urn:reelqueue:problem:${slug}`, title, detail, 0);
}

function networkProblem(err) {
  return new Problem(0, "network-error", "Network error", `the request did not complete (${err.message})`, 0);
}

function showError(err) {
  const p = err instanceof Problem ? err : networkProblem(err);
  $("error-title").textContent = p.status ? `${p.status} ${p.title}` : p.title;
  $("error-detail").textContent = p.detail;
  $("error-type").textContent = p.type;
  $("error").hidden = false;
}

function clearError() { $("error").hidden = true; }

// ---- the API -----------------------------------------------------------------------------------
async function api(path, { method = "GET", body, headers = {} } = {}) {
  if (!session) throw localProblem(401, "unauthorized", "Signed out", "sign in again");
  const sent = { Authorization: `Bearer ${session.token}`, ...headers };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers: sent, cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw networkProblem(err);
  }
  if (res.status === 401) signedOut();
  if (!res.ok) throw await problemOf(res);
  return res.status === 204 ? null : { body: await res.json(), headers: res.headers };
}

async function retrying(call, what) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (err) {
      const p = err instanceof Problem ? err : networkProblem(err);
      if (!p.retryable || attempt >= RETRIES) throw p;
      const wait = p.retryAfter ? p.retryAfter * 1000 : Math.min(8000, 500 * 2 ** attempt);
      what(`retrying in ${Math.round(wait / 1000)} s (${p.title})`);
      await sleep(wait);
    }
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- session -----------------------------------------------------------------------------------
function readSession() {
  try {
    const found = JSON.parse(sessionStorage.getItem(SESSION) || "null");
    return found && Date.parse(found.expires_at) > Date.now() ? found : null;
  } catch {
    return null;
  }
}

async function signIn(event) {
  event.preventDefault();
  clearError();
  const key = $("api-key").value.trim();
  $("api-key").value = ""; // the key leaves the page as soon as it is exchanged
  if (!key) return showError(localProblem(401, "unauthorized", "No API key", "paste your API key"));
  let res;
  try {
    res = await fetch("/v1/sessions", { method: "POST", cache: "no-store",
      headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" }, body: "{}" });
  } catch (err) {
    return showError(networkProblem(err));
  }
  if (!res.ok) return showError(await problemOf(res));
  session = await res.json();
  sessionStorage.setItem(SESSION, JSON.stringify(session));
  await enter();
}

function signedOut(message) {
  if (follower) follower.stop();
  session = null;
  sessionStorage.removeItem(SESSION);
  $("studio").hidden = $("current").hidden = $("history").hidden = $("sign-out").hidden = true;
  $("signin").hidden = false;
  $("who").textContent = message || "";
}

async function signOut() {
  try { await api("/v1/sessions/current", { method: "DELETE" }); } catch { /* ended anyway, here */ }
  sessionStorage.removeItem(CURRENT);
  signedOut("Signed out.");
  $("api-key").focus();
}

async function enter() {
  $("signin").hidden = true;
  $("studio").hidden = $("history").hidden = $("sign-out").hidden = false;
  try {
    const me = (await api("/v1/me")).body;
    $("who").textContent = `Tenant ${me.tenant_id} · ${me.credit_available} of ${me.credit_limit} credits left`;
    await loadProviders();
    await loadList(true);
    const current = sessionStorage.getItem(CURRENT);
    if (current) await open(current);
  } catch (err) {
    showError(err);
  }
  $("image-file").focus();
}

// ---- routes (provider, model, duration, ratio) -------------------------------------------------
let providers = [];

async function loadProviders() {
  providers = (await api("/v1/providers")).body;
  $("provider").replaceChildren(...providers.map((p) => new Option(p.name, p.name)));
  const emulator = providers.findIndex((p) => p.name === "emulator");
  if (emulator >= 0) $("provider").selectedIndex = emulator;
  providerChosen();
}

function providerChosen() {
  const p = providers.find((x) => x.name === $("provider").value);
  if (!p) return;
  const models = p.models || (p.name === "emulator" ? ["emu-motion-1"] : []);
  $("models").replaceChildren(...models.map((m) => new Option(m, m)));
  $("model").value = models[0] || "";
  $("ratio").replaceChildren(...p.aspect_ratios.map((r) => new Option(r, r)));
  $("duration").min = p.min_duration_s;
  $("duration").max = p.max_duration_s;
}

// ---- upload ------------------------------------------------------------------------------------
function uploadStatus(text) { $("upload-status").textContent = text; }

function progress(done, total) {
  $("upload-progress").hidden = false;
  $("upload-progress").value = total ? Math.round((100 * done) / total) : 0;
}

async function sha256(buffer) {
  const digest = await crypto.subtle.digest("SHA-256", buffer);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

// One PUT straight to storage (XMLHttpRequest: it reports upload progress); resolves the ETag.
function put(url, blob, headers, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("PUT", url);
    for (const [name, value] of Object.entries(headers)) xhr.setRequestHeader(name, value);
    xhr.upload.onprogress = (e) => onProgress(e.loaded);
    xhr.onload = () => (xhr.status >= 200 && xhr.status < 300 ? resolve(xhr.getResponseHeader("ETag"))
      : reject(new Problem(xhr.status, "storage-refused", "Storage refused the upload",
        `the storage answered ${xhr.status}`, 0)));
    xhr.onerror = () => reject(new Problem(0, "network-error", "Network error",
      "the upload to storage did not complete", 0));
    xhr.send(blob);
  });
}

async function upload(file) {
  clearError();
  assetId = null;
  if (file.size > MAX_IMAGE_BYTES) { // refused before hashing it: the API would refuse it too
    return showError(localProblem(413, "upload-too-large", "File too large", "images are limited to 25 MiB"));
  }
  try {
    uploadStatus("Computing the checksum…");
    const digest = await sha256(await file.arrayBuffer());
    const ticket = (await api("/v1/uploads", { method: "POST",
      body: { filename: file.name, size: file.size, content_type: file.type || "application/octet-stream",
        sha256: digest } })).body;
    uploadStatus("Uploading…");
    progress(0, file.size);
    let complete;
    if (ticket.parts) {
      const parts = [];
      let before = 0;
      for (const part of ticket.parts) {
        const start = (part.part_number - 1) * ticket.part_size;
        const etag = await retrying(() => put(part.url, file.slice(start, start + part.size), ticket.headers,
          (sent) => progress(before + sent, file.size)), uploadStatus);
        parts.push({ part_number: part.part_number, etag });
        before += part.size;
      }
      complete = { parts };
    } else {
      await retrying(() => put(ticket.upload_url, file, ticket.headers, (sent) => progress(sent, file.size)),
        uploadStatus);
    }
    progress(file.size, file.size);
    uploadStatus("VALIDATING");
    let view = (await api(`/v1/uploads/${ticket.id}/complete`, { method: "POST", body: complete })).body;
    while (view.status === "VALIDATING" || view.status === "PENDING") {
      await sleep(1000);
      view = (await api(`/v1/assets/${ticket.id}`)).body;
    }
    if (view.status === "READY") {
      assetId = ticket.id;
      uploadStatus(`READY: ${file.name} (${Math.round(view.size / 1024)} KiB checked)`);
    } else {
      uploadStatus(`REJECTED: ${view.reason}`);
    }
  } catch (err) {
    uploadStatus("Upload failed.");
    showError(err);
  }
}

// ---- create ------------------------------------------------------------------------------------
function createStatus(text) { $("create-status").textContent = text; }

function submission() {
  return { prompt: $("prompt").value, image_asset_id: assetId, provider: $("provider").value,
    model: $("model").value, duration_s: Number($("duration").value), aspect_ratio: $("ratio").value };
}

// A click joins the submission in flight; a click after a failed one retries it with the same key;
// only a changed form, or the end of the last one, starts a new submission with a new key.
function create(event) {
  event.preventDefault();
  clearError();
  if (!assetId) return showError(localProblem(422, "unknown-asset", "No image", "upload a reference image first"));
  if (!$("prompt").value.trim()) {
    $("prompt").focus();
    return showError(localProblem(400, "invalid-request", "No prompt", "write a prompt"));
  }
  const json = JSON.stringify(submission());
  if (pending && pending.json === json && pending.promise) return pending.promise;
  if (!pending || pending.json !== json) pending = { json, key: crypto.randomUUID() };
  const mine = pending;
  $("create").setAttribute("aria-busy", "true");
  createStatus("Creating…");
  mine.promise = retrying(() => api("/v1/generations", { method: "POST", body: JSON.parse(mine.json),
    headers: { "Idempotency-Key": mine.key } }), createStatus)
    .then(async ({ body }) => {
      pending = null;
      createStatus(`Created ${body.id}.`);
      await open(body.id);
      await loadList(true);
    })
    .catch((err) => {
      if (err instanceof Problem && !err.retryable) pending = null; // refused: a new submission next time
      else mine.promise = null; // kept: the next click retries it with the same key
      createStatus(pending ? "Not sent yet: press Create again to retry." : "Refused.");
      showError(err);
    })
    .finally(() => $("create").removeAttribute("aria-busy"));
  return mine.promise;
}

// ---- one generation: follow, show, play, cancel ------------------------------------------------
async function open(id) {
  if (follower) follower.stop();
  sessionStorage.setItem(CURRENT, id);
  $("current").hidden = false;
  $("gen-id").textContent = id;
  $("timeline").replaceChildren();
  $("status").textContent = "";
  $("player").hidden = true;
  $("player").removeAttribute("src");
  $("reason").textContent = "";
  await refresh(id);
  follower = new Follower(id);
  follower.run();
}

// One read of the generation at a time; events arriving meanwhile ask for one more read after it.
let reading = null;
let again = false;

function refresh(id) {
  if (reading) {
    again = true;
    return reading;
  }
  reading = read(id).finally(() => {
    reading = null;
    if (again) {
      again = false;
      refresh($("gen-id").textContent);
    }
  });
  return reading;
}

async function read(id) {
  try {
    const g = (await api(`/v1/generations/${id}`)).body;
    if ($("gen-id").textContent !== id) return;
    $("cost").textContent = g.cost === null ? `${g.estimated_cost} reserved` : `${g.cost} credits`;
    $("attempts").textContent = String(g.attempts);
    $("gen-prompt").textContent = g.prompt;
    $("reason").textContent = g.error || "";
    $("cancel").hidden = TERMINAL.has(g.status);
    play(g.assets);
  } catch (err) {
    if (!(err instanceof Problem && err.status === 0)) showError(err); // offline: the next event reads again
  }
}

// The proxy MP4 plays everywhere; HLS only where the browser plays it natively.
function play(assets) {
  const proxy = assets.find((a) => a.kind === "PROXY");
  const hls = assets.find((a) => a.kind === "HLS");
  const video = $("player");
  const source = proxy ? proxy.url : hls && video.canPlayType("application/vnd.apple.mpegurl") ? hls.url : null;
  if (!source || video.getAttribute("src") === source) return;
  video.src = source;
  video.hidden = false;
}

async function cancel() {
  const id = $("gen-id").textContent;
  clearError();
  try {
    const g = (await api(`/v1/generations/${id}/cancel`, { method: "POST" })).body;
    createStatus(`Cancel: ${g.outcome}.`);
    await refresh(id);
  } catch (err) {
    showError(err);
  }
}

// State events of one generation: a fetch stream (it carries the Authorization header, which an
// EventSource cannot), resumed with Last-Event-ID after a drop; polling the same cursor meanwhile.
class Follower {
  constructor(id) {
    this.id = id;
    this.cursor = null; // the last event id seen: no event is lost or shown twice across a drop
    this.seen = new Set();
    this.stopped = false;
    this.ended = false;
    this.abort = new AbortController();
  }

  stop() {
    this.stopped = true;
    this.abort.abort();
  }

  mode(text) { $("live").textContent = text; }

  async run() {
    let failures = 0;
    while (!this.stopped && !this.ended) {
      try {
        this.mode("(live)");
        await this.stream();
        failures = 0; // the server ends a stream after a few minutes: resume at once
      } catch (err) {
        if (this.stopped) return;
        if (err instanceof Problem && !err.retryable) return showError(err);
        failures++;
        this.mode("(reconnecting: polling)");
        await this.pollOnce().catch(() => {});
        await sleep(Math.min(POLL_MS * failures, 8000));
      }
    }
    this.mode("");
  }

  // GET /v1/events for this generation from the cursor on: as a stream, or as one JSON page.
  async events(stream) {
    const headers = { Authorization: `Bearer ${session.token}` };
    if (stream) headers.Accept = "text/event-stream";
    if (this.cursor) headers["Last-Event-ID"] = this.cursor;
    let res;
    try {
      res = await fetch(`/v1/events?task_id=${encodeURIComponent(this.id)}`,
        { headers, cache: "no-store", signal: this.abort.signal });
    } catch (err) {
      throw networkProblem(err);
    }
    if (res.status === 401) signedOut();
    if (!res.ok) throw await problemOf(res);
    return res;
  }

  async stream() {
    const res = await this.events(true);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      while (!this.ended) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        for (let end = buffer.indexOf("\n\n"); end >= 0; end = buffer.indexOf("\n\n")) {
          this.block(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (err) {
      throw networkProblem(err);
    } finally {
      reader.cancel().catch(() => {});
    }
  }

  block(text) {
    let id = null;
    let data = "";
    for (const line of text.split("\n")) {
      if (line.startsWith("id:")) id = line.slice(3).trim();
      else if (line.startsWith("data:")) data += line.slice(5).trim();
    }
    if (data) this.event(JSON.parse(data));
    if (id) this.cursor = id; // an id without data (keep-alive) moves the cursor on too
  }

  async pollOnce() {
    const page = await (await this.events(false)).json();
    for (const e of page.events) this.event(e);
    this.cursor = page.last_event_id;
  }

  event(e) {
    if (this.stopped || this.seen.has(e.event_id)) return;
    this.seen.add(e.event_id);
    const item = document.createElement("li");
    item.dataset.state = e.to_status;
    item.textContent = `${e.to_status} · ${new Date(e.at).toLocaleTimeString()}`;
    $("timeline").append(item);
    $("status").textContent = e.to_status;
    if (TERMINAL.has(e.to_status)) {
      this.ended = true;
      loadList(true);
    }
    refresh(this.id);
  }
}

// ---- the list ------------------------------------------------------------------------------------
async function loadList(first) {
  try {
    const query = new URLSearchParams({ limit: "10" });
    if (!first && nextCursor) query.set("cursor", nextCursor);
    const page = (await api(`/v1/generations?${query}`)).body;
    const rows = page.items.map((g) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "link";
      button.textContent = `${g.status} · ${g.prompt.slice(0, 60)}`;
      button.setAttribute("aria-label", `Open generation ${g.id}: ${g.status}`);
      button.addEventListener("click", () => open(g.id));
      item.append(button);
      return item;
    });
    if (first) $("list").replaceChildren(...rows);
    else $("list").append(...rows);
    nextCursor = page.next_cursor;
    $("more").hidden = !nextCursor;
  } catch (err) {
    showError(err);
  }
}

// ---- wiring ------------------------------------------------------------------------------------
$("signin-form").addEventListener("submit", signIn);
$("sign-out").addEventListener("click", signOut);
$("provider").addEventListener("change", providerChosen);
$("image-file").addEventListener("change", () => $("image-file").files[0] && upload($("image-file").files[0]));
$("create-form").addEventListener("submit", create);
$("cancel").addEventListener("click", cancel);
$("more").addEventListener("click", () => loadList(false));
const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  if (e.dataTransfer.files[0]) upload(e.dataTransfer.files[0]);
});
if (session) enter(); else $("api-key").focus();
