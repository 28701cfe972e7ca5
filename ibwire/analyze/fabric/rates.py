"""Link width and speed codes of PortInfo (IBA Vol 1 §14.2.5.6, table 165; extended speeds from IBA 1.3+
and opensm ib_types.h) and the comparison of what a link trained to with what its ends allow."""

WIDTHS = {0x01: ("1X", 1), 0x10: ("2X", 2), 0x02: ("4X", 4), 0x04: ("8X", 8), 0x08: ("12X", 12)}
SPEEDS = {0x1: ("SDR", 2.5), 0x2: ("DDR", 5.0), 0x4: ("QDR", 10.0)}
EXT_SPEEDS = {0x1: ("FDR", 14.0625), 0x2: ("EDR", 25.78125), 0x4: ("HDR", 53.125), 0x8: ("NDR", 106.25)}


def widths(mask: int):
    return [WIDTHS[b] for b in WIDTHS if mask & b]


def speeds(mask: int, ext_mask: int = 0):
    """(name, Gb/s per lane) of each speed a mask pair allows, slowest first."""
    out = [SPEEDS[b] for b in sorted(SPEEDS) if mask & b]
    out += [EXT_SPEEDS[b] for b in sorted(EXT_SPEEDS) if ext_mask & b]
    return out


def fastest(options):
    return max(options, key=lambda o: o[1]) if options else None


def port_modes(pi: dict) -> dict:
    """Supported / enabled / active width and speed of one port, from its PortInfo fields.

    Enabled width 0xFF and enabled speed 0xF mean "same as supported" (§14.2.5.6).  An extended speed
    field that is non-zero takes precedence for Active (the port runs FDR or faster).
    """
    w_sup = pi.get("linkwidthsupported", 0)
    w_ena = pi.get("linkwidthenabled", 0)
    w_ena = w_sup if w_ena == 0xFF else w_ena
    s_sup = pi.get("linkspeedsupported", 0)
    s_ena = pi.get("linkspeedenabled", 0)
    s_ena = s_sup if s_ena == 0xF else s_ena
    e_sup = pi.get("linkspeedextsupported", 0)
    e_ena = pi.get("linkspeedextenabled", 0)
    e_ena = e_sup if e_ena == 0x1F else e_ena
    e_act = pi.get("linkspeedextactive", 0)
    act_speed = fastest(speeds(0, e_act)) if e_act else fastest(speeds(pi.get("linkspeedactive", 0)))
    return {
        "width": {"supported": w_sup, "enabled": w_ena, "active": pi.get("linkwidthactive", 0)},
        "speed": {"supported": s_sup, "enabled": s_ena, "active": pi.get("linkspeedactive", 0)},
        "speed_ext": {"supported": e_sup, "enabled": e_ena, "active": e_act},
        "active_width": fastest(widths(pi.get("linkwidthactive", 0))),
        "active_speed": act_speed,
    }


def _best(a: dict, b: dict, kind: str):
    """Fastest width and speed both ends allow for `kind` ('supported' or 'enabled')."""
    w = fastest(widths(a["width"][kind] & b["width"][kind]))
    s = fastest(speeds(a["speed"][kind] & b["speed"][kind], a["speed_ext"][kind] & b["speed_ext"][kind]))
    return w, s


def rate_text(width, speed) -> str:
    if not width or not speed:
        return "unknown"
    return f"{width[0]} {speed[0]} ({width[1] * speed[1]:g} Gb/s)"


def gbps(width, speed) -> float:
    return width[1] * speed[1] if width and speed else 0.0


def compare_link(a: dict, b: dict) -> dict:
    """What the link trained to against the best both ends support and the best both ends enable.

    below_supported: it runs slower than what both ports support (the issue's "trained below what both
    ends support"); below_enabled: slower even than what both ends are configured to allow, which
    points to the physical link (cable, EEPROM, signal) rather than configuration.
    """
    act_w, act_s = a["active_width"] or b["active_width"], a["active_speed"] or b["active_speed"]
    active = gbps(act_w, act_s)
    sup_w, sup_s = _best(a, b, "supported")
    ena_w, ena_s = _best(a, b, "enabled")
    return {
        "active": rate_text(act_w, act_s),
        "active_gbps": active,
        "best_supported": rate_text(sup_w, sup_s),
        "best_supported_gbps": gbps(sup_w, sup_s),
        "best_enabled": rate_text(ena_w, ena_s),
        "best_enabled_gbps": gbps(ena_w, ena_s),
        "below_supported": bool(active and active < gbps(sup_w, sup_s)),
        "below_enabled": bool(active and active < gbps(ena_w, ena_s)),
    }
