// A conversation page follows the store: its event stream sends the live part again on each change.
(function () {
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var stream = new EventSource(live.dataset.events);
  stream.addEventListener("transcript", function (event) {
    live.innerHTML = JSON.parse(event.data);  // rendered by the server's templates, escaped there
  });
})();
