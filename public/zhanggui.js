// The upload dropzone and server answer in English; say it in Chinese (toasts only).
// The accepted types come from the server's list, so the toast says what the picker really takes.
(function () {
  var accepted = "PDF、Word、网页、纯文本、Markdown 或 .zip 压缩包";
  fetch("/project/accepted-types").then(function (r) { return r.ok ? r.json() : null; })
    .then(function (body) { if (body && body.labels) { accepted = body.labels; } })
    .catch(function () {});
  var rules = [
    [/^File type must be.*|File type not allowed.*/i, function () { return "不支持的文件类型：只能上传 " + accepted + "。"; }],
    [/^File is larger than (\d+) MB.*/i, function (_, mb) { return "文件太大：单个文件不能超过 " + mb + " MB。"; }],
    [/File size too large.*/i, function () { return "文件太大，超过了上传上限。"; }],
    [/^Too many files.*/i, function () { return "一次上传的文件太多了。"; }],
    // Chainlit's own "上传失败 NAME: REASON", in Chinese punctuation
    [/^上传失败 (.+?): (.*)$/, function (_, name, reason) { return "《" + name + "》上传失败：" + reason; }]
  ];
  function translate(node) {
    var titles = node.querySelectorAll ? node.querySelectorAll("[data-sonner-toast] [data-title]") : [];
    titles.forEach(function (el) {
      rules.forEach(function (rule) {
        if (rule[0].test(el.textContent)) {
          el.textContent = el.textContent.replace(rule[0], rule[1]);
        }
      });
    });
  }
  // A message that carries only attachments would leave an empty bubble under its files.
  function hideEmptyBubbles(node) {
    var bubbles = node.querySelectorAll ? node.querySelectorAll('.step[data-step-type="user_message"] .bg-accent.rounded-3xl') : [];
    bubbles.forEach(function (el) {
      var empty = !el.textContent.trim() && !el.querySelector("img, textarea, input, video, audio");
      el.style.display = empty ? "none" : "";
    });
  }
  new MutationObserver(function () { translate(document); hideEmptyBubbles(document); })
    .observe(document.documentElement, { childList: true, subtree: true });
})();
