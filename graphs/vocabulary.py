"""Words both graphs read product names by: naming a document's product when it is imported, and
telling a product from an interface or a tool when a question is asked."""
from __future__ import annotations

# A product noun right after a model says the model is a product; a technical noun says it is not.
PRODUCT_NOUNS = ("主板", "开发板", "板卡", "单板计算机", "单板机", "核心板", "计算模块", "模组", "模块", "小主机",
                 "主机", "路由器", "设备", "产品", "系列", "是一款", "是一个", "电脑", "控制器", "万用表", "电磁炉",
                 "打印机", "汽车", "轿车", "手机", "平板", "底板", "盒子", "套件")
TECH_NOUNS = ("芯片", "处理器", "系统", "镜像", "接口", "引脚", "命令", "协议", "驱动", "工具", "软件", "文件",
              "版本", "内核", "源码", "仓库", "脚本", "服务", "容器", "编译", "环境", "串口", "网络", "协处理器")
# Names of interfaces, systems and tools that manuals mention everywhere: never a product of the set.
TECH_TERMS = {
    "usb", "hdmi", "gpio", "uart", "i2c", "spi", "pwm", "adc", "sd", "tf", "emmc", "nvme", "ssd", "pcie", "sata",
    "mipi", "csi", "dsi", "dc", "ac", "led", "lcd", "wifi", "wi-fi", "bt", "ble", "poe", "rj45", "type-c", "typec",
    "linux", "debian", "ubuntu", "android", "windows", "macos", "docker", "gcc", "git", "ssh", "ftp", "http",
    "https", "url", "api", "sdk", "os", "cpu", "gpu", "npu", "ram", "rom", "ddr", "lpddr4", "dram", "flash",
    "u-boot", "uboot", "bios", "spl", "jtag", "risc-v", "arm", "x86", "ip", "tcp", "udp", "dns", "dhcp", "vpn",
    "nas", "ota", "pc", "faq", "readme", "the", "and", "for", "with", "this", "note", "tip", "warning", "info",
    "danger", "caution", "image", "images", "step", "version", "v", "id", "sn", "mac", "pin", "vcc", "gnd",
    "tx", "rx", "ok", "yes", "no", "on", "off", "ethernet", "bluetooth", "buildroot", "bootloader", "kernel",
    "eeprom", "rtc", "ir", "mcu", "soc", "cm", "lite", "pro", "max", "plus", "mini", "mm", "mb", "gb", "kb",
    # programming languages and the app: what a product is used with, never the product
    "python", "micropython", "java", "javascript", "lua", "app",
}
# Words a maker appends to a model to name another model of the line ("Mars Pro", "X3 Max"): written
# right after a held product's full name, they name a product the catalogue does not hold.
VARIANT_WORDS = frozenset({"pro", "max", "plus", "ultra", "lite", "mini", "nano", "air", "se"})
