// The console's live views. An element with data-events follows the store through server-sent
// events: a conversation's transcript and controls ("transcript"), the conversations list's first
// page ("rows"), and, on every page, what needs this operator ("attention": handoffs nobody took,
// new messages in their own conversations) for the tab's badge and notifications.
(function () {
  var title = document.title;
  var toasts = document.getElementById("toasts");
  var live = document.querySelector("[data-events]");
  if (!toasts) return;  // signed out
  var source = live ? live.dataset.events : "/attention";
  if (!window.EventSource) return;
  var stream = new EventSource(source);

  stream.addEventListener("transcript", function (event) {
    var target = document.getElementById("live");
    var typing = target.contains(document.activeElement) && /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (typing) {  // never replace what an operator is typing: update once they leave the field
      document.activeElement.addEventListener("blur", function () { target.innerHTML = JSON.parse(event.data); }, { once: true });
      return;
    }
    // Nor cut off a buyer's voice message or video an operator is playing: update once it stops.
    var playing = Array.prototype.filter.call(target.querySelectorAll("audio, video"), function (m) { return !m.paused; })[0];
    if (playing) {
      playing.addEventListener("pause", function () { target.innerHTML = JSON.parse(event.data); }, { once: true });
      return;
    }
    target.innerHTML = JSON.parse(event.data);  // rendered by the server's templates, escaped there
  });
  stream.addEventListener("rows", function (event) {
    document.getElementById("rows").innerHTML = JSON.parse(event.data);
  });

  // What was already there when this browser first looked is not news: only what comes after is.
  var key = "kefu-seen-" + toasts.dataset.attention;
  var seen = JSON.parse(sessionStorage.getItem(key) || "null");
  stream.addEventListener("attention", function (event) {
    var now = JSON.parse(JSON.parse(event.data));
    document.title = (now.badge ? "(" + now.badge + ") " : "") + title;
    var current = { waiting: {}, mine: {} };
    now.waiting.forEach(function (w) { current.waiting[w[0]] = 1; });
    now.mine.forEach(function (m) { current.mine[m[0]] = m[2]; });
    if (seen) {
      now.waiting.forEach(function (w) {
        if (!seen.waiting[w[0]]) notify(said(toasts.dataset.waiting, w[1]), w[0]);
      });
      now.mine.forEach(function (m) {
        if ((seen.mine[m[0]] || 0) < m[2]) notify(said(toasts.dataset.newMessage, m[1]), m[0]);
      });
    }
    seen = current;
    sessionStorage.setItem(key, JSON.stringify(seen));
  });

  // The words come from the page (base.html's #toasts, in the operator's language): `{name}` in
  // them is the buyer's name, put in as text (a function, so no `$&` in a name is read as a pattern).
  function said(words, name) {
    return words.replace("{name}", function () { return name; });
  }

  function notify(text, customer) {
    var toast = document.createElement("div");
    toast.className = "toast";
    var link = document.createElement("a");
    link.href = "/c/" + customer;
    link.textContent = text;  // a buyer's name: text, never markup
    toast.appendChild(link);
    toasts.appendChild(toast);
    toasts.dataset.raised = String(Number(toasts.dataset.raised || 0) + 1);
    setTimeout(function () { toast.remove(); }, 15000);
    if (window.Notification && Notification.permission === "granted") {
      var shown = new Notification("kefu", { body: text, tag: "kefu-" + customer });
      shown.onclick = function () { window.focus(); location.href = "/c/" + customer; };
      toasts.dataset.notified = String(Number(toasts.dataset.notified || 0) + 1);
    }
    beep();
  }

  function beep() {
    try {
      var audio = new (window.AudioContext || window.webkitAudioContext)();
      var tone = audio.createOscillator();
      tone.connect(audio.destination);
      tone.frequency.value = 880;
      tone.start();
      tone.stop(audio.currentTime + 0.15);
    } catch (e) { /* no sound before the page was touched: the badge and the toast still show */ }
  }

  // Browsers only ask for permission after a gesture: the first click anywhere asks once.
  if (window.Notification && Notification.permission === "default") {
    document.addEventListener("click", function () { Notification.requestPermission(); }, { once: true });
  }
})();
