// jobkit console: local times, small form helpers, and live updates from
// the console's event stream (Server-Sent Events fed by JobService.Watch).
// No inline script anywhere: the Content-Security-Policy forbids it.
(function () {
  "use strict";
  var rel = window.Intl && Intl.RelativeTimeFormat ? new Intl.RelativeTimeFormat(undefined, { numeric: "auto" }) : null;

  function relative(d) {
    var s = (d.getTime() - Date.now()) / 1000, a = Math.abs(s);
    if (!rel) return "";
    if (a < 60) return rel.format(Math.round(s), "second");
    if (a < 3600) return rel.format(Math.round(s / 60), "minute");
    if (a < 86400) return rel.format(Math.round(s / 3600), "hour");
    return rel.format(Math.round(s / 86400), "day");
  }

  // pick returns the elements sel selects in root, root included.
  function pick(root, sel) {
    var out = Array.prototype.slice.call(root.querySelectorAll(sel));
    if (root.matches && root.matches(sel)) out.unshift(root);
    return out;
  }

  // enhance prepares the elements in root (once each: a live refresh
  // enhances only the elements it adds): local times, the time zone of
  // filter forms, auto-submitting selects, confirmations, JSON checks.
  function enhance(root) {
    pick(root, "time[datetime]").forEach(function (t) {
      var v = t.getAttribute("datetime");
      if (!v) return;
      var d = new Date(v);
      if (isNaN(d)) return;
      t.title = t.textContent.trim();
      t.dataset.at = v;
      t.textContent = d.toLocaleString() + " (" + relative(d) + ")";
    });
    var zone = window.Intl ? Intl.DateTimeFormat().resolvedOptions().timeZone : "";
    pick(root, "input[data-tz]").forEach(function (i) { if (!i.value) i.value = zone; });
    pick(root, "select[data-autosubmit]").forEach(function (s) {
      s.addEventListener("change", function () { s.form.submit(); });
    });
    pick(root, "form[data-confirm]").forEach(function (f) {
      f.addEventListener("submit", function (e) { if (!window.confirm(f.dataset.confirm)) e.preventDefault(); });
    });
    pick(root, "form[data-json]").forEach(function (f) {
      var field = f.elements[f.dataset.json], out = f.querySelector("[data-json-error]");
      function check() {
        var v = field.value.trim(), msg = "";
        if (v) {
          try {
            if (!Array.isArray(JSON.parse(v))) msg = "The arguments must be a JSON array, like [1, \"two\"].";
          } catch (err) { msg = "Not valid JSON: " + err.message; }
        }
        field.setCustomValidity(msg);
        if (out) { out.textContent = msg; out.hidden = !msg; }
        return !msg;
      }
      field.addEventListener("input", check);
      f.addEventListener("submit", function (e) { if (!check()) { e.preventDefault(); field.focus(); } });
    });
  }

  // preview shows a trigger form's next fire times as its spec is typed.
  function preview(root) {
    pick(root, "[data-preview]").forEach(function (out) {
      var f = out.closest("form"), timer = null, seq = 0;
      function update() {
        var q = new URLSearchParams({ cron: f.elements.cron.value, tz: f.elements.tz.value, interval: f.elements.interval.value }), n = ++seq;
        fetch(out.dataset.preview + "?" + q, { credentials: "same-origin", cache: "no-store" })
          .then(function (r) { return r.ok ? r.text() : null; })
          .then(function (html) { if (html !== null && n === seq) { out.innerHTML = html; enhance(out); } })
          .catch(function () {});
      }
      ["cron", "tz", "interval"].forEach(function (name) {
        f.elements[name].addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(update, 150); });
      });
      if (f.elements.cron.value || f.elements.interval.value) update();
    });
  }

  // keyAttrs name the record a row shows; keyOf names an element among
  // its siblings across refreshes by its id or the first of these. Unnamed
  // elements pair up in order, so rows of a list that can gain rows in the
  // middle need one.
  var keyAttrs = ["data-id", "data-queue", "data-kind", "data-trigger", "data-definition", "data-node",
    "data-calendar", "data-rule", "data-channel", "data-incident"];
  function keyOf(n) {
    if (n.nodeType !== 1) return "";
    var k = n.id;
    for (var i = 0; !k && i < keyAttrs.length; i++) k = n.getAttribute(keyAttrs[i]);
    return k ? n.nodeName + "#" + k : "";
  }

  // morph makes the children of el read as those of next (a freshly
  // rendered copy) while keeping every element whose tag and key match:
  // an element the user is pressing, typing in or has focused stays the
  // very same node unless it changed itself. Attributes are synced (an
  // input's value attribute is its default: a value the user typed stays),
  // a <time> whose datetime is unchanged keeps its local text, and
  // elements new to the page are returned for enhance.
  function morph(el, next, added) {
    var old = Array.prototype.slice.call(el.childNodes), keyed = {}, loose = [];
    old.forEach(function (n) {
      var k = keyOf(n);
      if (k && !keyed[k]) keyed[k] = n; else loose.push(n);
    });
    var used = new Set(), kids = Array.prototype.slice.call(next.childNodes);
    kids.forEach(function (n, i) {
      var k = keyOf(n), m = null;
      if (k) {
        m = keyed[k] && !used.has(keyed[k]) ? keyed[k] : null;
      } else {
        for (var j = 0; j < loose.length; j++) {
          var c = loose[j];
          if (!used.has(c) && !keyOf(c) && c.nodeType === n.nodeType && c.nodeName === n.nodeName) { m = c; break; }
        }
      }
      if (m && m.nodeType === 1 && m.nodeName === "TIME" && m.getAttribute("datetime") !== n.getAttribute("datetime")) m = null;
      if (m) {
        used.add(m);
        update(m, n, added);
      } else {
        m = document.importNode(n, true);
        if (m.nodeType === 1) added.push(m);
      }
      if (el.childNodes[i] !== m) el.insertBefore(m, el.childNodes[i] || null);
    });
    old.forEach(function (n) { if (!used.has(n) && n.parentNode === el) el.removeChild(n); });
  }

  // update makes node cur read as next (same type and tag).
  function update(cur, next, added) {
    if (cur.nodeType !== 1) {
      if (cur.nodeValue !== next.nodeValue) cur.nodeValue = next.nodeValue;
      return;
    }
    // Kept as they are: a <time> of the same datetime (its local text),
    // and what the script fills itself (the trigger preview, a JSON
    // check's message; mark such an element data-client).
    if (cur.nodeName === "TIME" || cur.hasAttribute("data-preview") || cur.hasAttribute("data-json-error") || cur.hasAttribute("data-client")) return;
    Array.prototype.slice.call(cur.attributes).forEach(function (a) {
      if (!next.hasAttribute(a.name)) cur.removeAttribute(a.name);
    });
    Array.prototype.slice.call(next.attributes).forEach(function (a) {
      if (cur.getAttribute(a.name) !== a.value) cur.setAttribute(a.name, a.value);
    });
    morph(cur, next.nodeName === "TEMPLATE" ? next.content : next, added);
  }

  // Live updates: on each change, fetch this page's content again (at most
  // every 250 ms) and morph the page into it, changing only what changed.
  function live(main, rendered) {
    var url = main.dataset.live, m = location.pathname.match(/\/instances\/([0-9a-fA-F-]{8,})$/);
    if (m) url += "?instance=" + encodeURIComponent(m[1]);
    // shown is the page content as the server last rendered it (before
    // enhance), normalised by the browser's serialiser: a refresh that
    // brings the same content leaves the page alone.
    var pending = false, busy = false, last = 0, refreshes = 0, shown = rendered;
    // config is the digest of the queues' pauses, the triggers and the
    // definitions that the content shown was read after (the answer's
    // X-Jobkit-Config); the feed sends the current one every second.
    var config = null;
    // A page that asks for few refreshes was just rendered fresh: its
    // refresh on open waits out the same interval, so loading a text
    // search runs it once, not twice at once.
    if (main.querySelector("[data-live-every]")) last = Date.now();
    function refresh() {
      if (busy) { pending = true; return; }
      // A page may ask for fewer refreshes (a text search re-reads up to
      // thousands of instances): data-live-every, in milliseconds.
      var slow = main.querySelector("[data-live-every]"), every = slow ? Number(slow.dataset.liveEvery) || 250 : 250;
      var wait = every - (Date.now() - last);
      if (wait > 0) { pending = true; setTimeout(refresh, wait); return; }
      pending = false; busy = true; last = Date.now();
      fetch(location.href, { headers: { "X-Jobkit-Fragment": "1" }, credentials: "same-origin", cache: "no-store" })
        .then(function (r) {
          if (r.status === 401) { location.reload(); return null; }
          var c = r.headers.get("X-Jobkit-Config");
          if (c) config = c;
          return r.ok ? r.text() : null;
        })
        .then(function (html) {
          if (html === null || html === undefined) return;
          var t = document.createElement("template");
          t.innerHTML = html;
          if (t.innerHTML === shown) return;
          shown = t.innerHTML;
          // Only what changed is touched, so a button being clicked, a
          // field being typed in and the focus all stay where they are.
          var added = [];
          morph(main, t.content, added);
          added.forEach(function (n) { enhance(n); preview(n); });
          document.body.dataset.refreshes = String(++refreshes);
        })
        .catch(function () {})
        .then(function () { busy = false; if (pending) setTimeout(refresh, 0); });
    }
    var es = new EventSource(url);
    // On (re)opening, refresh once: a change between the page's render and
    // the feed's start (or during a reconnection) has no event of its own.
    es.addEventListener("open", function () {
      document.body.dataset.live = "open";
      refresh();
    });
    es.addEventListener("error", function () { document.body.dataset.live = "reconnecting"; });
    es.addEventListener("change", function () { refresh(); });
    // A queue paused, a trigger or definition changed outside this
    // console: the digest differs from the one the content was read after.
    es.addEventListener("config", function (ev) { if (ev.data !== config) refresh(); });
    // Progress reports are not events (they would flood the feed): while
    // the page shows the progress bar of a running instance, its content
    // is fetched again every second, and only then.
    setInterval(function () {
      if (main.querySelector("progress[data-running]")) refresh();
    }, 1000);
  }

  // Relative times move on: every 5 s, each time shown is told again
  // against the clock (a time replaced by a live refresh is enhanced
  // anew).
  function retell() {
    pick(document, "time[data-at]").forEach(function (t) {
      var d = new Date(t.dataset.at), text = d.toLocaleString() + " (" + relative(d) + ")";
      if (t.textContent !== text) t.textContent = text;
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setInterval(retell, 5000);
    var main = document.getElementById("live"), rendered = main ? main.innerHTML : "";
    enhance(document);
    preview(document);
    if (main && main.dataset.live && window.EventSource) live(main, rendered);
  });
})();
