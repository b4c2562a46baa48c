// Canned replies in a conversation's reply box (worker/console/team.py): typing `/` at the start of
// a line, then a few letters, lists the shop's matching replies, rendered by the server for this
// buyer and this operator; arrow keys and Enter, or a click, put the chosen one in place of `/query`.
(function () {
  var box = document.getElementById("text");
  var page = /^\/c\/(\d+)\/?$/.exec(window.location.pathname);
  if (!box || !page || !window.fetch) return;
  var url = "/c/" + page[1] + "/canned?q=";

  var list = document.createElement("ul");
  list.id = "canned-list";
  list.hidden = true;
  list.setAttribute("role", "listbox");
  box.insertAdjacentElement("afterend", list);

  var replies = [], chosen = 0, asked = 0, slash = -1;

  // Where the `/query` being typed starts (the caret's line begins with it), or -1.
  function slashAt() {
    var end = box.selectionStart;
    if (end !== box.selectionEnd) return -1;
    var start = box.value.lastIndexOf("\n", end - 1) + 1;
    return /^\/\S*$/.test(box.value.slice(start, end)) ? start : -1;
  }

  function hide() {
    list.hidden = true;
    replies = [];
    slash = -1;
  }

  function show() {
    list.textContent = "";
    replies.forEach(function (reply, index) {
      var item = document.createElement("li");
      item.setAttribute("role", "option");
      item.dataset.shortcut = reply.shortcut;
      if (index === chosen) item.className = "on";
      var shortcut = document.createElement("span");
      shortcut.className = "shortcut";
      shortcut.textContent = "/" + reply.shortcut;
      var text = document.createElement("span");
      text.className = "text";
      text.textContent = reply.text;
      item.appendChild(shortcut);
      item.appendChild(text);
      item.addEventListener("mousedown", function (event) {
        event.preventDefault(); // keep the caret in the reply box
        insert(index);
      });
      list.appendChild(item);
    });
    list.hidden = replies.length === 0;
  }

  function lookUp() {
    var start = slashAt();
    if (start < 0) return hide();
    var query = box.value.slice(start + 1, box.selectionStart);
    var mine = ++asked;
    fetch(url + encodeURIComponent(query), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : []; })
      .then(function (found) {
        if (mine !== asked) return; // a later keystroke asked again
        if (slashAt() !== start) return hide();
        slash = start;
        replies = Array.isArray(found) ? found : [];
        chosen = 0;
        show();
      })
      .catch(function () { if (mine === asked) hide(); });
  }

  function insert(index) {
    var reply = replies[index];
    if (!reply || slash < 0) return;
    var end = box.selectionStart;
    box.value = box.value.slice(0, slash) + reply.text + box.value.slice(end);
    var caret = slash + reply.text.length;
    box.setSelectionRange(caret, caret);
    hide();
    box.focus();
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }

  box.addEventListener("input", lookUp);
  box.addEventListener("click", lookUp);
  box.addEventListener("blur", function () { hide(); });
  box.addEventListener("keydown", function (event) {
    if (list.hidden || event.isComposing) return; // Enter also confirms a Chinese input method's word
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      chosen = (chosen + (event.key === "ArrowDown" ? 1 : replies.length - 1)) % replies.length;
      show();
    } else if (event.key === "Enter" || event.key === "Tab") {
      insert(chosen);
    } else if (event.key === "Escape") {
      hide();
    } else {
      return;
    }
    event.preventDefault();
  });
})();
