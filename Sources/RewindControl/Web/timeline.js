// The recorder's timeline page: one lane per stream on a shared time axis (the recorder clock, with wall-clock
// labels), hover thumbnails, a frame view stepping through stored frames, range export, saves, markers, and a
// live status panel fed by the event stream. When the recorder stops or cannot be reached, the page says so, marks
// what only a live recorder knows (memory, status) as stale and tries again less and less often; when it answers
// again, the page reloads its streams. Wall-clock times are local time with their zone. Every string from the store or a client is put into the page as
// text (textContent), never as markup.
"use strict";

const SECOND = 1e9;
const GAP_COLOURS = {
  "memory budget": "#f97316", "pinned frames": "#fb923c", "spill behind": "#ef4444",
  "evicted before spill": "#dc2626", "disk error": "#a855f7", "input interval": "#eab308",
  "damaged": "#ec4899", "frames dropped on arrival": "#f43f5e", "recorder stopped": "#6b7280",
  "input failed": "#14b8a6", "retention": "#94a3b8", "unrecognized": "#a3e635",
};
// Nothing is recorded before recorder time 0.
const NOTHING_BEFORE_ZERO = "nothing is recorded before recorder time 0";
const RETRY_FIRST = 1000, RETRY_MOST = 15000;
// A request the recorder has not answered in this long is given up (a recorder stopped with Ctrl-Z or stuck takes
// the connection and answers nothing); the event stream is silent when no `status` came in SILENT_AFTER.
const REQUEST_TIMEOUT = 10000, SILENT_AFTER = 8000;
const state = {
  streams: [],          // [{name, format, width, height, frame_duration_value, frame_duration_timescale, …}]
  timelines: new Map(), // name → {buckets, wall_offset_ns}
  markers: [],
  saves: new Map(),     // id → save object
  status: null,
  from: 0, to: 30 * SECOND,
  follow: true,
  liveEdge: 0,
  selecting: null,      // {start, end, stream}
  panning: null,        // {x, from, to}
  frame: null,          // {stream, pts}
  frameMessage: null,   // the message about a frame that could not be shown, while it is up
  loadMessage: null,    // the message about a timeline that could not be loaded, while it is up
  refreshTimer: null,
  wallOffset: null,
  axisLabels: [],       // the wall-clock labels the axis shows, in order
  steps: Promise.resolve(), // frame view requests, one after another: each step starts from the frame before
  connection: "live",   // live | stopping | lost | unauthorized
  lostAt: null,         // when the recorder stopped answering (ms since the epoch)
  retryDelay: RETRY_FIRST,
  retryTimer: null,
  events: null,
  lastEventAt: 0,       // when the event stream last sent something (ms since the epoch)
  started: false,
};
const $ = (id) => document.getElementById(id);

// ---- API -------------------------------------------------------------------------------------------------------

// A failed request: `unreachable` when no answer came (the recorder stopped, or the network), else the HTTP
// status and the API's error code.
class RequestError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
    this.unreachable = status === 0;
  }
}

async function request(path, options) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT);
  try {
    return await fetch(path, { credentials: "same-origin", signal: controller.signal, ...options });
  } catch (_) {
    if (controller.signal.aborted) {
      throw new RequestError("the recorder sent nothing for " + REQUEST_TIMEOUT / 1000 + " s", 0, "silent");
    }
    throw new RequestError("the recorder is not reachable", 0, "unreachable");
  } finally {
    clearTimeout(timer);
  }
}

async function failure(response) {
  let message = response.status + " " + response.statusText, code = "";
  try {
    const error = (await response.json()).error;
    if (error) { message = error.message || error.code; code = error.code || ""; }
  } catch (_) { /* not JSON */ }
  return new RequestError(message, response.status, code);
}

async function api(method, path, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await request(path, options);
  if (!response.ok) throw await failure(response);
  const type = response.headers.get("Content-Type") || "";
  return type.includes("json") ? response.json() : response;
}

// What a failed frame request means to the person looking: the recorder gone, the token gone, busy, or no frame.
function frameFailureText(error, name, which, t) {
  if (error.unreachable) return "the recorder is not reachable: no frame of " + name + " can be shown";
  if (error.status === 401) return "the recorder no longer accepts this page's token cookie: " + REOPEN;
  if (error.status === 503 && error.code === "stopping") return "the recorder is stopping: no frame can be shown";
  if (error.status === 503) return "the recorder is busy (too many requests at once): try again";
  if (error.status === 404) return "no frame of " + name + " " + which + " " + formatSeconds(t);
  return "frame of " + name + " at " + formatSeconds(t) + ": " + error.message;
}
const REOPEN = "open the page as /?token=TOKEN again (the token is in the recorder's DIR/token, or its --token-file)";

function ns(value) { return Math.round(value) + "ns"; }
function streamPath(name) { return "/v1/streams/" + encodeURIComponent(name); }
function say(text) { $("message").textContent = text || ""; }
// A message about a frame that could not be shown goes once a frame is shown or the frame view closes, one about a
// timeline that could not be loaded (the recorder busy, say) once a later load succeeds; messages about anything
// else stay.
function sayAboutFrames(text) { say(text); state.frameMessage = text; }
// Clears the message kept under `key` ("frameMessage", "loadMessage") if it is still the one shown.
function forgetMessage(key) {
  if (state[key] && $("message").textContent === state[key]) say("");
  state[key] = null;
}

// ---- Formatting ------------------------------------------------------------------------------------------------

// To the millisecond at any length of recording, as the command line says times; an axis tick as precise as the
// ticks are apart (`step`, nanoseconds).
function formatSeconds(nanoseconds, step) {
  const digits = step == null ? 3 : step >= SECOND ? 0 : step >= 1e8 ? 1 : step >= 1e7 ? 2 : 3;
  // Cut, not rounded, as the command line cuts: a time shown is never after its frame, so `--from` that time
  // starts at the frame shown.
  const unit = 10 ** (9 - digits);
  return (Math.floor(nanoseconds / unit) / 10 ** digits).toFixed(digits) + "s";
}
// Wall-clock times are local time, as `rewind clip --from 14:03:05.200` reads a time of day; the full form is
// ISO-8601 with the zone's offset (2026-11-30T15:03:05.200+01:00), which the command line reads as the same instant.
function pad(value, width) { return String(value).padStart(width || 2, "0"); }
function zoneOffset(date) {
  const minutes = -date.getTimezoneOffset(), sign = minutes < 0 ? "-" : "+", size = Math.abs(minutes);
  return sign + pad(Math.floor(size / 60)) + ":" + pad(size % 60);
}
function localParts(wallNanoseconds) {
  const date = new Date(Math.floor(wallNanoseconds / 1e6));
  return {
    date: date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()),
    day: pad(date.getMonth() + 1) + "-" + pad(date.getDate()),
    minute: pad(date.getHours()) + ":" + pad(date.getMinutes()),
    second: pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()),
    milliseconds: pad(date.getMilliseconds(), 3),
    zone: zoneOffset(date),
  };
}
function formatWall(wallNanoseconds) {
  const parts = localParts(wallNanoseconds);
  return parts.date + "T" + parts.second + "." + parts.milliseconds + parts.zone;
}
function formatClock(date) { return pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()); }
// An axis label: as precise as the ticks are apart, with the date once they are hours apart.
function formatWallTick(wallNanoseconds, step) {
  const parts = localParts(wallNanoseconds);
  if (step >= 3.6e12) return parts.day + " " + parts.minute;
  if (step >= SECOND) return parts.second;
  return parts.second + "." + parts.milliseconds;
}
function formatBytes(bytes) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
  let value = bytes, unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return (unit ? value.toFixed(1) : value) + " " + units[unit];
}

// ---- Geometry --------------------------------------------------------------------------------------------------

function laneWidth() { return $("lanes").clientWidth || 800; }
function timeAt(x) { return state.from + (x / laneWidth()) * (state.to - state.from); }
function xAt(t) { return ((t - state.from) / (state.to - state.from)) * laneWidth(); }
function localX(event) { return event.clientX - $("lanes").getBoundingClientRect().left; }

// ---- Loading ---------------------------------------------------------------------------------------------------

async function loadStreams() {
  const list = await api("GET", "/v1/streams");
  state.streams = list.streams;
  const lanes = $("lanes");
  lanes.textContent = "";
  for (const stream of state.streams) {
    const lane = document.createElement("div");
    lane.className = "lane";
    lane.dataset.stream = stream.name;
    const name = document.createElement("span");
    name.className = "lane-name";
    name.textContent = stream.name + "  " + stream.width + "×" + stream.height + " " + stream.format +
      (stream.recording === false ? "  (stored: not recording)" : "");
    lane.classList.toggle("stored", stream.recording === false);
    const problem = document.createElement("span");
    problem.className = "lane-error";
    const canvas = document.createElement("canvas");
    canvas.height = 48;
    lane.append(name, problem, canvas);
    attachLaneEvents(lane, stream.name);
    lanes.append(lane);
  }
  const fieldset = $("export-streams");
  for (const old of fieldset.querySelectorAll("label")) old.remove();
  // The recorded streams are exported by default; a stored stream (read from the disk) when its box is ticked.
  for (const stream of state.streams) {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = stream.recording !== false;
    box.value = stream.name;
    label.append(box, document.createTextNode(" " + stream.name + (box.checked ? " " : " (stored) ")));
    fieldset.append(label);
  }
}

async function loadStatus() {
  const status = await api("GET", "/v1/status");
  applyStatus(status);
}

function applyStatus(status) {
  state.status = status;
  let edge = 0;
  for (const stream of status.streams || []) {
    // Stream pts → recorder time, the axis every lane shares.
    const offset = stream.clock_offset_ns || 0;
    if (stream.memory_last_pts_ns != null) edge = Math.max(edge, stream.memory_last_pts_ns + offset);
    if (stream.clock_wall_ns != null) state.wallOffset = stream.clock_wall_ns;
  }
  if (edge > 0) state.liveEdge = edge;
  renderStatus();
  renderInputErrors();
}

// A stream whose input failed says so on its lane, with the input's error.
function renderInputErrors() {
  const errors = new Map();
  for (const stream of (state.status && state.status.streams) || []) {
    if (stream.input_error) errors.set(stream.stream, stream.input_error);
  }
  for (const lane of $("lanes").children) {
    const problem = lane.querySelector(".lane-error");
    const error = errors.get(lane.dataset.stream);
    problem.textContent = error ? "input failed: " + error : "";
    lane.classList.toggle("input-failed", Boolean(error));
  }
}

async function loadTimelines() {
  const buckets = Math.max(10, Math.min(2000, Math.floor(laneWidth() / 2)));
  // Nothing is recorded before recorder time 0; a recorder that does not answer is not asked.
  const from = Math.max(0, Math.floor(state.from)), to = Math.ceil(state.to);
  if (to <= from + buckets || state.connection !== "live") { render(); return; }
  let failed = null;
  await Promise.all(state.streams.map(async (stream) => {
    try {
      const timeline = await api("GET", streamPath(stream.name) + "/timeline?from=" + ns(from) + "&to=" + ns(to) +
        "&buckets=" + buckets);
      state.timelines.set(stream.name, timeline);
      if (timeline.wall_offset_ns != null) state.wallOffset = timeline.wall_offset_ns;
    } catch (error) {
      if (!noteConnectionFailure(error)) {
        failed = stream.name + ": " + error.message;
        say(failed);
      }
    }
  }));
  if (failed) state.loadMessage = failed;
  else if (state.connection === "live") forgetMessage("loadMessage");
  if (state.connection !== "live") { render(); return; }
  // A recorder without a store (`--spill off`, no `segments` in its status) keeps no markers: not asked.
  if (state.status && state.status.segments == null) { state.markers = []; render(); return; }
  try {
    state.markers = (await api("GET", "/v1/markers?from=" + ns(from) + "&to=" + ns(to))).markers || [];
  } catch (error) { if (!noteConnectionFailure(error)) state.markers = []; }
  render();
}

async function loadSaves() {
  try {
    const list = await api("GET", "/v1/saves");
    // The recorder's list replaces the page's: after a restart the ids start again, and the old run's are gone.
    state.saves = new Map(list.saves.map((save) => [save.id, save]));
    renderSaves();
  } catch (error) { noteConnectionFailure(error); /* the list is optional */ }
}

// ---- Rendering -------------------------------------------------------------------------------------------------

function render() {
  renderAxis();
  for (const lane of $("lanes").children) renderLane(lane);
  renderSelection();
  renderMarkers();
}

function renderAxis() {
  const canvas = $("axis-canvas");
  const width = laneWidth();
  canvas.width = width;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, width, canvas.height);
  context.fillStyle = "#94a3b8";
  context.font = "11px system-ui";
  const span = state.to - state.from;
  const steps = [1e6, 1e7, 1e8, 5e8, 1e9, 5e9, 1e10, 3e10, 6e10, 3e11, 6e11, 1.8e12, 3.6e12, 8.64e13];
  const step = steps.find((s) => span / s <= width / 110) || steps[steps.length - 1];
  const labels = [];
  for (let t = Math.ceil(state.from / step) * step; t <= state.to; t += step) {
    const x = xAt(t);
    context.fillRect(x, 24, 1, 12);
    context.fillText(formatSeconds(t, step), x + 3, 12);
    if (state.wallOffset != null) {
      const label = formatWallTick(t + state.wallOffset, step);
      labels.push(label);
      context.fillText(label, x + 3, 24);
    }
  }
  state.axisLabels = labels;
  if (state.wallOffset != null) {
    $("zone").textContent = "Wall-clock times are local time (UTC" + localParts(state.from + state.wallOffset).zone +
      ").";
  }
}

function renderLane(lane) {
  const name = lane.dataset.stream;
  const canvas = lane.querySelector("canvas");
  const width = laneWidth();
  canvas.width = width;
  const context = canvas.getContext("2d");
  context.clearRect(0, 0, width, canvas.height);
  const timeline = state.timelines.get(name);
  if (timeline) {
    for (const bucket of timeline.buckets) {
      const x0 = xAt(bucket.start_ns), x1 = Math.max(x0 + 1, xAt(bucket.end_ns));
      if (bucket.disk > 0) {
        context.globalAlpha = 0.35 + 0.65 * bucket.disk;
        context.fillStyle = "#64748b";
        context.fillRect(x0, 26, x1 - x0, 16);
      }
      if (bucket.memory > 0 && state.connection === "live") {
        context.globalAlpha = 0.35 + 0.65 * bucket.memory;
        context.fillStyle = "#3b82f6";
        context.fillRect(x0, 8, x1 - x0, 16);
      } else if (bucket.memory > 0) {
        // What memory held when the recorder last answered: an outline, not a claim about now.
        context.strokeStyle = "#3b82f6";
        context.setLineDash([3, 3]);
        context.strokeRect(x0 + 0.5, 8.5, Math.max(1, x1 - x0 - 1), 15);
        context.setLineDash([]);
      }
      context.globalAlpha = 1;
      (bucket.gaps || []).forEach((reason, i) => {
        context.fillStyle = GAP_COLOURS[reason] || "#f8fafc";
        context.fillRect(x0, 42 + i * 2, x1 - x0, 2);
      });
    }
  }
  for (const old of lane.querySelectorAll(".marker, .hold, .save-band")) old.remove();
  const labels = [];
  for (const marker of state.markers) {
    if (!isOnLane(marker, name)) continue;
    if (marker.hold_from_ns != null && marker.hold_to_ns != null) {
      const hold = document.createElement("div");
      hold.className = "hold";
      hold.style.left = xAt(marker.hold_from_ns) + "px";
      hold.style.width = Math.max(1, xAt(marker.hold_to_ns) - xAt(marker.hold_from_ns)) + "px";
      lane.append(hold);
    }
    const line = document.createElement("div");
    line.className = "marker";
    line.dataset.markerId = marker.id;
    line.style.left = xAt(marker.at_ns) + "px";
    const label = document.createElement("span");
    label.textContent = marker.label;
    label.dir = "auto";
    line.append(label);
    lane.append(line);
    labels.push({ x: xAt(marker.at_ns), label });
  }
  placeMarkerLabels(lane, labels);
  for (const save of state.saves.values()) {
    if (save.state !== "waiting" && save.state !== "exporting") continue;
    if (!savedStreams(save).includes(name)) continue;
    const band = document.createElement("div");
    band.className = "save-band";
    band.style.left = xAt(save.from_ns) + "px";
    band.style.width = Math.max(2, (xAt(save.to_ns) - xAt(save.from_ns)) * Math.max(0.02, save.progress || 0)) + "px";
    lane.append(band);
  }
}

// The streams a save covers: its own; for `all`, the streams that got a track (`tracks`, once known), or until then
// the streams the recorder records (not the stored ones, which `all` does not include).
function savedStreams(save) {
  if (save.stream !== "all") return [save.stream];
  if (save.tracks && save.tracks.length) return save.tracks;
  return state.streams.filter((stream) => stream.recording !== false).map((stream) => stream.name);
}

// Marker labels in two rows, each after the lane's name and clear of the label before it; a label with room in
// neither (markers close together when zoomed out) is hidden, and stays in the markers panel and the hover caption.
function placeMarkerLabels(lane, labels) {
  const name = lane.querySelector(".lane-name");
  // The first row beside the name, the second under it.
  const rows = [name ? name.offsetLeft + name.offsetWidth + 6 : 0, 0];
  const tops = [2, name ? name.offsetTop + name.offsetHeight + 1 : 16];
  labels.sort((a, b) => a.x - b.x);
  // Every width read before any label moves: one layout, not one per label.
  const widths = labels.map(({ label }) => label.offsetWidth);
  labels.forEach(({ x, label }, index) => {
    const left = x + 4;
    const row = rows.findIndex(right => left >= right);
    label.hidden = row < 0;
    if (row < 0) return;
    label.style.top = tops[row] + "px";
    rows[row] = left + widths[index] + 6;
  });
}

// Whether `marker` shows on the lane of stream `name`: its own, or every stream's.
function isOnLane(marker, name) {
  return !marker.stream || marker.stream === "all" || marker.stream === name;
}

// The labels of the markers within a few pixels of `x` on lane `name`, for the hover caption (marker lines and
// labels let the pointer through to the lane).
function markersNear(name, x) {
  const near = state.markers.filter((marker) => isOnLane(marker, name) && Math.abs(xAt(marker.at_ns) - x) <= 4);
  return near.slice(0, 3).map((marker) => "  ◆ " + marker.label).join("") + (near.length > 3 ? "  …" : "");
}

function renderMarkers() {
  const list = $("marker-list");
  // Rebuilt only when the markers changed, not at every status event.
  const key = JSON.stringify(state.markers);
  if (key === renderMarkers.shown) return;
  renderMarkers.shown = key;
  list.textContent = "";
  for (const marker of state.markers) {
    const item = document.createElement("li");
    item.dataset.markerId = marker.id;
    // The label isolated: its own direction marks (U+202E) cannot reverse the text around it.
    const label = document.createElement("bdi");
    label.textContent = marker.label;
    item.append(formatSeconds(marker.at_ns) + "  " + marker.stream + "  ", label,
      marker.hold_from_ns != null ? "  (held " + formatSeconds(marker.hold_from_ns) + " … " +
        formatSeconds(marker.hold_to_ns) + ")" : "");
    list.append(item);
  }
}

function renderSelection() {
  const box = $("selection");
  if (!state.selecting) { box.hidden = true; return; }
  const a = Math.min(state.selecting.start, state.selecting.end);
  const b = Math.max(state.selecting.start, state.selecting.end);
  box.hidden = false;
  box.style.left = xAt(a) + "px";
  box.style.width = Math.max(1, xAt(b) - xAt(a)) + "px";
}

function renderStatus() {
  const list = $("status-list");
  list.textContent = "";
  const status = state.status;
  if (!status) return;
  const add = (term, value) => {
    const dt = document.createElement("dt");
    dt.textContent = term;
    const dd = document.createElement("dd");
    dd.textContent = value;
    list.append(dt, dd);
  };
  for (const stream of status.streams || []) {
    add("stream", stream.stream);
    add("memory", formatBytes(stream.memory_bytes || 0) + " of " + formatBytes(stream.memory_budget_bytes || 0) +
      " (" + (stream.memory_frames || 0) + " frames)");
    add("pressure", stream.pressure || "normal");
    if (stream.spill_lag_frames != null) add("spill lag", stream.spill_lag_frames + " frames");
    add("frames durable", String(stream.frames_durable ?? "—"));
    const drops = Object.entries(stream.drops || {}).filter(([, n]) => n > 0);
    add("drops", drops.length ? drops.map(([reason, n]) => reason + ": " + n).join(", ") : "none");
    if (stream.input_error) add("input", "input failed: " + stream.input_error);
    else if (stream.input_ended) add("input", "ended (" + stream.input_ended + ")");
    else if (stream.input_stalled) {
      add("input", "stalled: no frame for " + ((stream.input_idle_ns || 0) / 1e9).toFixed(1) + " s");
    }
  }
  if (status.disk_bytes != null) {
    add("disk", formatBytes(status.disk_bytes) + (status.disk_budget_bytes ? " of " +
      formatBytes(status.disk_budget_bytes) : ""));
  }
  if (status.segments != null) add("segments", String(status.segments));
  // The process against the memory contract: resident within the budget in force + 48 MiB.
  if (status.resident_bytes != null && status.memory_budget_bytes != null) {
    const limit = status.memory_budget_bytes + 48 * 1024 * 1024;
    add("process", formatBytes(status.resident_bytes) + " resident " +
      (status.resident_bytes <= limit ? "within" : "OVER") + " its limit of " + formatBytes(limit) +
      (status.heap_bytes != null ? "; heap " + formatBytes(status.heap_bytes) : ""));
  }
}

function renderSaves() {
  const list = $("save-list");
  list.textContent = "";
  // Every save the recorder lists (the newest 1000 finished ones and those still to finish), newest first: the
  // panel scrolls.
  const saves = [...state.saves.values()].sort((a, b) => b.id - a.id);
  for (const save of saves) {
    const item = document.createElement("li");
    item.dataset.saveId = save.id;
    item.dataset.state = save.state;
    const text = document.createElement("span");
    text.textContent = "#" + save.id + " " + save.stream + " " + formatSeconds(save.from_ns) + " … " +
      formatSeconds(save.to_ns) + " " + save.state + " ";
    item.append(text);
    if (save.state === "waiting" || save.state === "exporting") {
      const bar = document.createElement("progress");
      bar.max = 1;
      bar.value = save.progress || 0;
      item.append(bar);
    } else if (save.state === "done") {
      // One link per file: a .y4m or .mp4 of several streams is a file per stream, file N of the export's `files`.
      const files = save.files || [];
      const several = files.length > 1;
      (several ? files : [null]).forEach((path, index) => {
        const link = document.createElement("a");
        link.href = "/v1/files/" + encodeURIComponent(save.id) + (several ? "?file=" + index : "");
        link.className = "download";
        link.textContent = several ? path.split("/").pop() : "download";
        link.setAttribute("download", "");
        item.append(link, document.createTextNode(" "));
      });
    } else if (save.error) {
      const error = document.createElement("span");
      error.textContent = save.error.message || save.error.code || "";
      item.append(error);
    }
    list.append(item);
  }
  for (const lane of $("lanes").children) renderLane(lane);
}

// ---- View changes ----------------------------------------------------------------------------------------------

// Shows [from, to); a span outside 50 ms … 7 days is clamped around `anchor` (by default the middle), which keeps
// its place on the screen, so zooming past either limit never moves the view.
function setView(from, to, follow, anchor) {
  const minimum = 50e6, maximum = 7 * 24 * 3600 * SECOND;
  // A view no number can describe (an event's delta beyond any zoom) leaves the view as it was.
  if (!Number.isFinite(from) || !Number.isFinite(to) || (anchor != null && !Number.isFinite(anchor))) return;
  const span = Math.min(maximum, Math.max(minimum, to - from));
  if (span !== to - from) {
    const fixed = anchor ?? (from + to) / 2;
    const share = to > from ? Math.min(1, Math.max(0, (fixed - from) / (to - from))) : 0.5;
    from = fixed - share * span;
  }
  state.from = from;
  state.to = from + span;
  state.follow = follow;
  $("live-button").disabled = follow;
  render();
  scheduleRefresh();
}

function scheduleRefresh() {
  clearTimeout(state.refreshTimer);
  state.refreshTimer = setTimeout(() => loadTimelines(), 120);
}

function followLiveEdge() {
  if (!state.follow || !state.liveEdge) return;
  const span = state.to - state.from;
  // Recorder time starts at 0: until the recording is longer than the view, the view starts there.
  const from = Math.max(0, state.liveEdge - span * 0.95);
  setView(from, from + span, true);
}

// ---- Lanes: hover, select, click ----------------------------------------------------------------------------------

function attachLaneEvents(lane, name) {
  const canvas = lane.querySelector("canvas");
  canvas.addEventListener("mousemove", (event) => {
    const x = localX(event);
    if (state.panning) return;
    if (state.selecting) {
      state.selecting.end = timeAt(x);
      state.selecting.moved = true;
      renderSelection();
      return;
    }
    showThumbnail(name, timeAt(x), event);
  });
  canvas.addEventListener("mouseleave", () => { $("thumbnail").hidden = true; $("hover-line").hidden = true; });
  canvas.addEventListener("mousedown", (event) => {
    if (event.button !== 0) return;
    if (event.shiftKey) { startPan(event); return; }
    const t = timeAt(localX(event));
    state.selecting = { start: t, end: t, stream: name, moved: false };
    renderSelection();
  });
}

let thumbnailRequest = 0;
function showThumbnail(name, t, event) {
  const figure = $("thumbnail");
  const image = $("thumbnail-image");
  const x = localX(event);
  const line = $("hover-line");
  line.hidden = false;
  line.style.left = x + "px";
  figure.hidden = false;
  // Inside the lane, and never off its left edge when the lane is narrower than the picture.
  figure.style.left = Math.max(0, Math.min(x - 160, laneWidth() - 330)) + "px";
  figure.style.top = (event.clientY - $("timeline").getBoundingClientRect().top + 16) + "px";
  figure.dataset.stream = name;
  const ticket = ++thumbnailRequest;
  clearTimeout(showThumbnail.timer);
  const nothing = (text) => {
    $("thumbnail-caption").textContent = text;
    image.removeAttribute("src");
    for (const key of ["pts", "time", "stream"]) delete image.dataset[key];
  };
  if (t < 0) { nothing("no frame of " + name + " at or before " + formatSeconds(t) + ": " + NOTHING_BEFORE_ZERO); return; }
  if (state.connection !== "live") { nothing(connectionText()); return; }
  const url = streamPath(name) + "/frame?at=" + ns(t) + "&width=320";
  showThumbnail.timer = setTimeout(async () => {
    try {
      const response = await request(url);
      if (ticket !== thumbnailRequest) return;
      if (!response.ok) {
        const error = await failure(response);
        if (ticket === thumbnailRequest) nothing(frameFailureText(error, name, "at or before", t));
        noteConnectionFailure(error);
        return;
      }
      const pts = Number(response.headers.get("X-Rewind-Pts-Ns"));
      const time = Number(response.headers.get("X-Rewind-Time-Ns"));
      const blob = await response.blob();
      if (ticket !== thumbnailRequest) return;
      if (image.src.startsWith("blob:")) URL.revokeObjectURL(image.src);
      image.src = URL.createObjectURL(blob);
      image.dataset.pts = String(pts);
      image.dataset.time = String(time);
      image.dataset.stream = name;
      $("thumbnail-caption").textContent = name + " " + formatSeconds(time) + markersNear(name, x);
    } catch (error) {
      if (ticket === thumbnailRequest) nothing(frameFailureText(error, name, "at or before", t));
      noteConnectionFailure(error);
    }
  }, 40);
}

document.addEventListener("mouseup", (event) => {
  if (state.panning) { state.panning = null; return; }
  const selection = state.selecting;
  // A click inside the open export dialog (ticking a stream) ends no drag: the range stays as it was opened.
  if (!selection || $("export-dialog").open) return;
  if (!selection.moved || Math.abs(xAt(selection.end) - xAt(selection.start)) < 4) {
    state.selecting = null;
    renderSelection();
    showFrame(selection.stream, selection.start);
    return;
  }
  const from = Math.min(selection.start, selection.end), to = Math.max(selection.start, selection.end);
  if (to <= 0) {
    state.selecting = null;
    renderSelection();
    say("no frames in range " + formatSeconds(from) + " … " + formatSeconds(to) + ": " + NOTHING_BEFORE_ZERO);
    return;
  }
  openExport(Math.max(0, from), to);
});

// ---- Pan and zoom ----------------------------------------------------------------------------------------------

function startPan(event) {
  state.panning = { x: event.clientX, from: state.from, to: state.to };
}
$("axis").addEventListener("mousedown", (event) => startPan(event));
document.addEventListener("mousemove", (event) => {
  if (!state.panning) return;
  const dx = event.clientX - state.panning.x;
  const shift = (dx / laneWidth()) * (state.panning.to - state.panning.from);
  setView(state.panning.from - shift, state.panning.to - shift, false);
});
$("timeline").addEventListener("wheel", (event) => {
  event.preventDefault();
  const anchor = timeAt(localX(event));
  // One event zooms at most 10× either way (a huge delta would make the factor infinite).
  const factor = Math.exp(Math.max(-Math.LN10, Math.min(Math.LN10, event.deltaY * 0.002)));
  if (event.shiftKey || Math.abs(event.deltaX) > Math.abs(event.deltaY)) {
    const shift = ((event.deltaX || event.deltaY) / laneWidth()) * (state.to - state.from);
    setView(state.from + shift, state.to + shift, false);
    return;
  }
  setView(anchor - (anchor - state.from) * factor, anchor + (state.to - anchor) * factor,
    state.follow && factor < 1 ? false : state.follow, anchor);
}, { passive: false });
$("live-button").addEventListener("click", () => { state.follow = true; followLiveEdge(); });

// ---- Frame view ------------------------------------------------------------------------------------------------

// Frame requests go one after another, each starting from the frame the one before showed: ten quick presses of
// → step ten frames.
function showFrame(name, t) {
  state.steps = state.steps.then(() => openFrame(name, t));
}
function stepFrame(direction) {
  state.steps = state.steps.then(() => state.frame && openFrame(state.frame.stream, state.frame.time, direction));
}

async function openFrame(name, t, step) {
  const which = step === "after" ? "after" : step === "before" ? "before" : "at or before";
  if (!step && t < 0) {
    sayAboutFrames("no frame of " + name + " at or before " + formatSeconds(t) + ": " + NOTHING_BEFORE_ZERO);
    return;
  }
  const query = "/frame?at=" + ns(t) + (step ? "&step=" + step : "");
  try {
    const response = await request(streamPath(name) + query);
    if (!response.ok) {
      const error = await failure(response);
      if (!noteConnectionFailure(error) || !step) sayAboutFrames(frameFailureText(error, name, which, t));
      return;
    }
    const pts = Number(response.headers.get("X-Rewind-Pts-Ns"));
    const time = Number(response.headers.get("X-Rewind-Time-Ns"));
    const wall = response.headers.get("X-Rewind-Wall-Ns");
    const blob = await response.blob();
    const image = $("frame-image");
    if (image.src.startsWith("blob:")) URL.revokeObjectURL(image.src);
    image.src = URL.createObjectURL(blob);
    image.dataset.pts = String(pts);
    state.frame = { stream: name, time };
    forgetMessage("frameMessage");
    const caption = $("frame-caption");
    caption.dataset.pts = String(pts);
    caption.dataset.time = String(time);
    caption.dataset.stream = name;
    caption.dataset.wall = wall ? formatWall(Number(wall)) : "";
    caption.textContent = name + "  pts " + pts + " ns (" + formatSeconds(pts) + ")  recorder time " +
      formatSeconds(time) + (wall ? "  wall " + formatWall(Number(wall)) + " (local time)" : "");
    if (!$("frame-view").open) $("frame-view").showModal();
  } catch (error) {
    noteConnectionFailure(error);
    sayAboutFrames(frameFailureText(error, name, which, t));
  }
}

$("frame-view").addEventListener("keydown", (event) => {
  if (!state.frame) return;
  if (event.key === "ArrowRight") { event.preventDefault(); stepFrame("after"); }
  if (event.key === "ArrowLeft") { event.preventDefault(); stepFrame("before"); }
});
$("frame-view").addEventListener("close", () => { state.frame = null; forgetMessage("frameMessage"); });

// ---- Export, save, mark ----------------------------------------------------------------------------------------

// A save as an answer or an event reports it. The answer to a request can arrive after the events of the export it
// started (a clip of a stored stream is done at once): a save never goes back to an earlier state.
const SAVE_STATE_ORDER = { waiting: 0, exporting: 1, done: 2, failed: 2, cancelled: 2 };
function noteSave(save) {
  const known = state.saves.get(save.id);
  if (known && (SAVE_STATE_ORDER[known.state] || 0) > (SAVE_STATE_ORDER[save.state] || 0)) return;
  state.saves.set(save.id, save);
}

function openExport(from, to) {
  state.exportRange = { from, to };
  // Each range starts from the recorded streams ticked, whatever the last export chose.
  for (const box of $("export-streams").querySelectorAll("input")) {
    box.checked = state.streams.some((stream) => stream.name === box.value && stream.recording !== false);
  }
  $("export-range").textContent = formatSeconds(from) + " … " + formatSeconds(to) + " (" +
    formatSeconds(to - from) + ")";
  $("export-dialog").showModal();
}

$("export-dialog").addEventListener("close", async () => {
  const range = state.exportRange;
  state.selecting = null;
  renderSelection();
  if ($("export-dialog").returnValue !== "export" || !range) return;
  const format = $("export-format").value;
  const chosen = [...$("export-streams").querySelectorAll("input:checked")].map((box) => box.value);
  if (chosen.length === 0) { say("nothing was exported: choose at least one stream"); return; }
  // `all` is every stream the recorder records: one .mkv with a track each; stored streams get files of their own.
  const recorded = state.streams.filter((stream) => stream.recording !== false).map((stream) => stream.name);
  const everyRecorded = recorded.length > 1 && recorded.every((name) => chosen.includes(name));
  const streams = everyRecorded && format === "mkv"
    ? ["all", ...chosen.filter((name) => !recorded.includes(name))] : chosen;
  // Every stream's outcome, said together when any export was refused (one message would replace another).
  const outcomes = [];
  let refused = false;
  for (const stream of streams) {
    try {
      const save = await api("POST", "/v1/clips", {
        stream, from: ns(Math.floor(range.from)), to: ns(Math.ceil(range.to)), format,
      });
      noteSave(save);
      outcomes.push("export of " + stream + ": #" + save.id + " " + save.state);
    } catch (error) {
      refused = true;
      outcomes.push("export of " + stream + ": " + error.message);
    }
  }
  if (refused) say(outcomes.join("; "));
  renderSaves();
});

$("save-button").addEventListener("click", async () => {
  const seconds = Number($("save-seconds").value);
  if (!(seconds >= 0.001)) { say("the number of seconds to save must be at least 0.001"); return; }
  // Whole milliseconds written out: never a number in exponent form ("1e-7s", "1e+21s"), which is no duration.
  // At most what the API takes (106751 days): more than any store holds.
  const milliseconds = Math.round(Math.min(seconds, 9e9) * 1000).toFixed(0);
  try {
    const save = await api("POST", "/v1/saves", { stream: state.streams.length > 1 ? "all" : undefined,
      last: milliseconds + "ms" });
    noteSave(save);
    renderSaves();
    say("");
  } catch (error) {
    say("save: " + error.message);
  }
});

$("marker-button").addEventListener("click", async () => {
  const label = $("marker-label").value.trim();
  if (!label) { say("a marker needs a label"); return; }
  try {
    await api("POST", "/v1/markers", { label, stream: state.streams.length > 1 ? "all" : undefined });
    $("marker-label").value = "";
    say("");
    scheduleRefresh();
  } catch (error) {
    say("marker: " + error.message);
  }
});

// ---- Events and the connection ---------------------------------------------------------------------------------

function listen() {
  if (state.events) state.events.close();
  const events = new EventSource("/v1/events", { withCredentials: true });
  state.events = events;
  state.lastEventAt = Date.now();
  events.addEventListener("status", (event) => {
    state.lastEventAt = Date.now();
    applyStatus(JSON.parse(event.data));
    followLiveEdge();
  });
  events.addEventListener("save", (event) => {
    const data = JSON.parse(event.data);
    const save = data.save || data;
    noteSave(save);
    renderSaves();
  });
  for (const type of ["marker", "marker_removed", "gap", "segment"]) {
    events.addEventListener(type, () => scheduleRefresh());
  }
  events.addEventListener("pressure", () => loadStatus().catch(noteConnectionFailure));
  events.addEventListener("disk_error", (event) => say("disk error: " + JSON.parse(event.data).message));
  events.addEventListener("input_failed", (event) => {
    const data = JSON.parse(event.data);
    say(data.stream + ": input failed: " + data.message);
    loadStatus().catch(noteConnectionFailure);
    scheduleRefresh();
  });
  // Said at once; the saves the recorder finishes while it stops follow, then the stream ends.
  events.addEventListener("stopping", () => setConnection("stopping"));
  // The stream ended or never opened: the recorder stopped, went away, or refused the cookie. Ask it how it is
  // rather than let the browser retry on its own.
  events.onerror = () => {
    events.close();
    if (state.events === events) state.events = null;
    checkConnection();
  };
}

// A request failed for want of a recorder (no answer) or of a token (401): the page says so and waits for it.
// Returns whether it was such a failure.
function noteConnectionFailure(error) {
  if (error && error.unreachable) { setConnection(error.code === "silent" ? "silent" : "lost"); return true; }
  if (error && error.status === 401) { setConnection("unauthorized"); return true; }
  return false;
}

function connectionText() {
  const retry = state.retryTimer ? "; trying again every " + Math.round(state.retryDelay / 1000) + " s" : "";
  switch (state.connection) {
    case "stopping": return "the recorder is stopping: what the page shows is as of now";
    case "busy": return "the recorder is busy (too many connections): what the page shows is as of " +
      formatClock(new Date(state.lostAt)) + retry;
    case "lost":
      return "the recorder stopped or is not reachable (since " + formatClock(new Date(state.lostAt)) +
        "): memory and status are as of then" + retry;
    case "silent":
      return "the recorder has sent nothing since " + formatClock(new Date(state.lostAt)) +
        ": it is stopped (Ctrl-Z, kill -STOP) or stuck; memory and status are as of then" + retry;
    case "unauthorized": return "the recorder no longer accepts this page's token cookie: " + REOPEN + retry;
    default: return "";
  }
}

function setConnection(connection) {
  const was = state.connection;
  if (connection === "live") {
    state.connection = "live";
    state.lostAt = null;
    state.retryDelay = RETRY_FIRST;
    clearTimeout(state.retryTimer);
    state.retryTimer = null;
  } else {
    // Silent since its last event; anything else since now.
    if (was === "live" || state.lostAt == null) {
      state.lostAt = connection === "silent" && state.lastEventAt ? state.lastEventAt : Date.now();
    }
    state.connection = connection;
    // A recorder that is stopping still sends the saves it finishes, then ends the stream: the page listens on
    // until the end (`onerror`), so they show as done with their files.
    if (state.events && connection !== "stopping") { state.events.close(); state.events = null; }
    if (!state.retryTimer) scheduleCheck();
  }
  document.body.dataset.connection = state.connection;
  $("status").classList.toggle("stale", state.connection !== "live");
  $("lanes").classList.toggle("stale", state.connection !== "live");
  $("status-stale").textContent = state.connection === "live" ? "" :
    " (stale: as of " + formatClock(new Date(state.lostAt)) + ")";
  const banner = $("connection");
  banner.textContent = connectionText();
  banner.hidden = state.connection === "live";
  if (was !== state.connection) render();
}

// Looks again after a delay that doubles each time the recorder does not answer (1 s … 15 s).
function scheduleCheck() {
  clearTimeout(state.retryTimer);
  state.retryTimer = setTimeout(() => {
    state.retryTimer = null;
    state.retryDelay = Math.min(RETRY_MOST, state.retryDelay * 2);
    checkConnection();
  }, state.retryDelay);
}

async function checkConnection() {
  let response;
  try {
    response = await request("/v1/health");
  } catch (error) {
    setConnection(error.code === "silent" ? "silent" : "lost");
    return;
  }
  if (response.ok) { await reconnected(); return; }
  // 503 is `stopping`, or `unavailable` (too many connections): a busy recorder still runs. Any other answer (a
  // proxy's own 503 page while the recorder is down) is no word from the recorder.
  const code = response.status === 503 ? (await failure(response)).code : "";
  setConnection(response.status === 401 ? "unauthorized" : code === "stopping" ? "stopping" :
    code === "unavailable" ? "busy" : "lost");
  if (!state.retryTimer) scheduleCheck();
}

// The recorder answers (again): the message goes, and the streams, status, saves and lanes are read afresh (a new
// run may record other streams).
async function reconnected() {
  const was = state.connection;
  try {
    await connect();
  } catch (error) {
    if (!noteConnectionFailure(error)) say("cannot load the recorder's streams: " + error.message);
    if (state.connection === "live") setConnection("lost");
    return;
  }
  setConnection("live");
  if (was !== "live") say("");
  listen();
  scheduleRefresh();
}

// Reads the streams, the status and the saves; the first time, places the view at the live edge.
async function connect() {
  await loadStreams();
  await loadStatus();
  await loadSaves();
  if (!state.started) {
    state.started = true;
    const span = 30 * SECOND;
    setView(Math.max(0, state.liveEdge - span * 0.95), Math.max(span, state.liveEdge + span * 0.05), true);
  }
}

// ---- Start -----------------------------------------------------------------------------------------------------

async function start() {
  legend();
  window.addEventListener("resize", () => render());
  setInterval(() => {
    if (state.follow && state.connection === "live") loadStatus().then(followLiveEdge).catch(noteConnectionFailure);
    // The recorder sends `status` every second while the page listens: silence is a recorder that no longer runs
    // its loop (stopped with Ctrl-Z, stuck), whose connections stay open.
    if (state.connection === "live" && state.events && Date.now() - state.lastEventAt > SILENT_AFTER) {
      setConnection("silent");
    }
  }, 1000);
  try {
    await connect();
    listen();
  } catch (error) {
    if (!noteConnectionFailure(error)) say("cannot load the recorder's streams: " + error.message);
  }
}

function legend() {
  const box = $("legend");
  const entries = [["in memory", "#3b82f6"], ["on disk", "#64748b"], ["marker", "#facc15"], ["export", "#22c55e"],
    ...Object.entries(GAP_COLOURS).map(([reason, colour]) => ["gap: " + reason, colour])];
  for (const [text, colour] of entries) {
    const item = document.createElement("span");
    item.style.setProperty("--swatch", colour);
    item.textContent = text;
    box.append(item);
  }
}

start();
