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
    var k = n.getAttribute("id");
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
    // A <details> keeps the folding the user gave it, a row the focus
    // the keys gave it.
    var own = function (name) { return name === "open" && cur.nodeName === "DETAILS" || name === "tabindex" && cur.nodeName === "TR"; };
    Array.prototype.slice.call(cur.attributes).forEach(function (a) {
      if (!next.hasAttribute(a.name) && !own(a.name)) cur.removeAttribute(a.name);
    });
    Array.prototype.slice.call(next.attributes).forEach(function (a) {
      if (cur.getAttribute(a.name) !== a.value && !own(a.name)) cur.setAttribute(a.name, a.value);
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
          document.dispatchEvent(new CustomEvent("jobkit:refreshed"));
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

  // selection drives the Instances list's checkboxes: the count of ticked
  // rows, the box that ticks every row of the page, the buttons enabled
  // only with a selection, and a confirmation before a delete. Rows a live
  // refresh removes leave the selection with their boxes.
  function selection() {
    var form = document.getElementById("selected");
    if (!form) return;
    function boxes() { return Array.prototype.slice.call(document.querySelectorAll('input[type="checkbox"][form="selected"]')); }
    function recount() {
      var all = boxes(), n = all.filter(function (b) { return b.checked; }).length;
      document.getElementById("selected-count").textContent = n ? n + " selected" : "None selected";
      Array.prototype.forEach.call(form.querySelectorAll("button"), function (b) { b.disabled = n === 0; });
      var head = document.getElementById("select-all");
      if (head) { head.checked = n > 0 && n === all.length; head.indeterminate = n > 0 && n < all.length; }
      Array.prototype.forEach.call(all, function (b) { var tr = b.closest("tr"); if (tr) tr.classList.toggle("selected", b.checked); });
    }
    document.addEventListener("change", function (e) {
      var t = e.target;
      if (t.id === "select-all") boxes().forEach(function (b) { b.checked = t.checked; });
      if (t.id === "select-all" || t.getAttribute("form") === "selected") recount();
    });
    document.addEventListener("jobkit:refreshed", recount);
    form.addEventListener("submit", function (e) {
      var n = boxes().filter(function (b) { return b.checked; }).length;
      if (e.submitter && e.submitter.value === "delete" && !window.confirm("Delete the " + n + " selected instance" + (n === 1 ? "" : "s") + ", their history and their logs?")) e.preventDefault();
    });
    recount();
  }

  // keys are the keyboard shortcuts (the help dialog lists them): g then
  // a letter goes to a page, / focuses the page's search, j and k move
  // between the rows of the first table, Enter opens the row's link, x
  // ticks its box, ? opens the help.
  function keys() {
    var dialog = document.getElementById("keys"), prefix = document.body.dataset.prefix || "", go = false, goTimer = null;
    if (!dialog) return;
    var pages = { o: "/", q: "/queues", i: "/instances", j: "/jobs", e: "/executors", n: "/nodes", c: "/calendars", a: "/alerts" };
    function help() { if (!dialog.open) dialog.showModal(); }
    document.getElementById("keys-open").addEventListener("click", help);
    document.getElementById("keys-close").addEventListener("click", function () { dialog.close(); });
    function rows() {
      var t = document.querySelector("main table tbody");
      return t ? Array.prototype.slice.call(t.rows) : [];
    }
    document.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return;
      var t = e.target, tag = t && t.nodeName;
      if (tag === "INPUT" && t.type !== "checkbox" || tag === "TEXTAREA" || tag === "SELECT" || (t && t.isContentEditable)) return;
      if (dialog.open) return;
      var k = e.key;
      if (go) {
        go = false;
        clearTimeout(goTimer);
        if (pages[k]) { e.preventDefault(); location.href = prefix + pages[k]; }
        return;
      }
      if (k === "g") { go = true; goTimer = setTimeout(function () { go = false; }, 1500); return; }
      if (k === "?") { e.preventDefault(); help(); return; }
      if (k === "/") {
        // Focused at the key's release, so the "/" typed goes nowhere.
        var f = document.querySelector('main input[type="search"], main form.filters input:not([type="hidden"]):not([type="checkbox"]), main input[name="kind"]');
        if (f) {
          e.preventDefault();
          document.addEventListener("keyup", function once(u) {
            if (u.key !== "/") return;
            document.removeEventListener("keyup", once);
            f.focus();
            if (f.select) f.select();
          });
        }
        return;
      }
      if (k === "j" || k === "k") {
        var rs = rows();
        if (!rs.length) return;
        var cur = rs.indexOf(document.activeElement && document.activeElement.closest ? document.activeElement.closest("tr") : null);
        var next = k === "j" ? Math.min(cur + 1, rs.length - 1) : Math.max(cur - 1, 0);
        if (cur < 0) next = 0;
        rs[next].tabIndex = -1;
        rs[next].focus();
        rs[next].scrollIntoView({ block: "nearest" });
        e.preventDefault();
        return;
      }
      var row = document.activeElement && document.activeElement.nodeName === "TR" ? document.activeElement : null;
      if (row && k === "Enter") {
        var a = row.querySelector("a[href]");
        if (a) { e.preventDefault(); a.click(); }
      } else if (row && k === "x") {
        var box = row.querySelector('input[type="checkbox"]');
        if (box) { e.preventDefault(); box.click(); }
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    selection();
    keys();
    setInterval(retell, 5000);
    var main = document.getElementById("live"), rendered = main ? main.innerHTML : "";
    enhance(document);
    preview(document);
    if (main && main.dataset.live && window.EventSource) live(main, rendered);
  });
})();
