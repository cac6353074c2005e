"""Prints the CodeUri `sam build` gave a function in .aws-sam/build/template.yaml (relative
to .aws-sam/build): where its bootstrap is, shared builds included."""
import sys

import yaml


class Loader(yaml.SafeLoader):
    pass


# CloudFormation's short tags (!Ref, !GetAtt, ...) are not needed here: read them as None.
Loader.add_multi_constructor("!", lambda loader, suffix, node: None)

with open(".aws-sam/build/template.yaml") as f:
    template = yaml.load(f, Loader=Loader)
print(template["Resources"][sys.argv[1]]["Properties"]["CodeUri"])
