"""setup.py for neurips25: nbdev's standard layout, reading settings.ini (no pkg_resources)."""
import re
from configparser import ConfigParser
import setuptools
from setuptools import setup

cfg_parser = ConfigParser(delimiters=['='])
cfg_parser.read('settings.ini', encoding='utf-8')
cfg = cfg_parser['DEFAULT']

for key in 'version description keywords author author_email'.split():
    assert key in cfg, f"settings.ini is missing '{key}'"

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
            'mit': ('MIT License', 'OSI Approved :: MIT License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
lic = licenses.get(cfg.get('license', 'apache2').lower(), (cfg.get('license'), None))
min_python = cfg.get('min_python', '3.11')

requirements = cfg.get('requirements', '').split()
if cfg.get('pip_requirements'): requirements += cfg.get('pip_requirements', '').split()
dev_requirements = cfg.get('dev_requirements', '').split()
console_scripts = cfg.get('console_scripts', '').split()


def series_extras(cfg) -> dict:
    "The extras of settings.ini's `extra_<pNN>_<module>` keys (named pNN and <module>), `extra_<name>` keys, and `all`."
    extras = {}
    for key in cfg:
        if not key.startswith('extra_'):
            continue
        name, reqs = key[len('extra_'):], cfg[key].split()
        m = re.fullmatch(r'(p\d\d)_(\w+)', name)
        for alias in (m.groups() if m else (name,)):
            assert alias not in extras and alias not in ('all', 'dev'), f"settings.ini: extra {alias!r} twice"
            extras[alias] = reqs
    extras['all'] = sorted({r for reqs in extras.values() for r in reqs})
    # one specifier per package across requirements and extras (a torch range in one extra and another elsewhere
    # would make `all` ask for their intersection without anyone noticing)
    spec = {}
    for r in requirements + extras['all']:
        name = re.split(r'[<>=!~\[; ]', r, maxsplit=1)[0].lower().replace('_', '-')
        assert spec.setdefault(name, r) == r, f"settings.ini: {spec[name]!r} and {r!r} disagree"
    return extras


extras_require = {**series_extras(cfg), 'dev': dev_requirements}

setup(
    name=cfg['lib_name'],
    version=cfg['version'],
    description=cfg['description'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    author=cfg['author'],
    author_email=cfg['author_email'],
    license=lic[0],
    url=cfg.get('git_url'),
    keywords=cfg['keywords'],
    classifiers=['Development Status :: ' + statuses[int(cfg.get('status', '3'))],
                 'Intended Audience :: ' + cfg.get('audience', 'Science/Research').title(),
                 'Natural Language :: ' + cfg.get('language', 'English').title(),
                 'Programming Language :: Python :: ' + min_python]
                + (['License :: ' + lic[1]] if lic[1] else []),
    packages=setuptools.find_packages(include=['neurips25', 'neurips25.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require=extras_require,
    python_requires='>=' + min_python,
    zip_safe=False,
    entry_points={'console_scripts': console_scripts, 'nbdev': [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"]},
)
