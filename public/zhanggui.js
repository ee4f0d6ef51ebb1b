// The upload dropzone and server answer in English; say it in Chinese (toasts only, nothing else).
(function () {
  var rules = [
    [/^File type must be/i, "不支持的文件类型：只能上传 PDF 或 Markdown（.md）说明书。"],
    [/File type not allowed/i, "不支持的文件类型：只能上传 PDF 或 Markdown（.md）说明书。"],
    [/^File is larger than (\d+) MB/i, "文件太大：单个文件不能超过 $1 MB。"],
    [/File size too large/i, "文件太大，超过了上传上限。"],
    [/^Too many files/i, "一次上传的文件太多了。"]
  ];
  function translate(node) {
    var titles = node.querySelectorAll ? node.querySelectorAll("[data-sonner-toast] [data-title]") : [];
    titles.forEach(function (el) {
      rules.forEach(function (rule) {
        if (rule[0].test(el.textContent)) {
          el.textContent = el.textContent.replace(rule[0], rule[1]).replace(/^(.*?。).*$/, "$1");
        }
      });
    });
  }
  new MutationObserver(function () { translate(document); })
    .observe(document.documentElement, { childList: true, subtree: true });
})();
